"""Outside attack: SIGKILL of the loop's whole process group at random moments (issue 11
acceptance). One run is killed `TRIALS` times at seeded random delays and resumed each time; it
must end with the same verdicts, scores, champions and refs as an undisturbed run, verify, and
leave no loop temp file. Slow: about 3 minutes on a 2-core box."""

from __future__ import annotations

import os
import random
import signal
import subprocess
from pathlib import Path

import pytest

from sil.integrity.verify import verify_run_ledger
from tests.crash.test_crash_matrix import LOOP_TEMP, SIL, make_workspace, outcome, run_dir, run_sil

TRIALS = 20
SEED = 11
DELAY_S = (0.3, 4.0)


def kill_group_after(root: Path, delay: float) -> int | None:
    """Start `sil run` in its own process group, SIGKILL the group after `delay`; its exit code if it ended first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIL_SIGN", "SIL_CRASH", "SIL_DISK"))}
    proc = subprocess.Popen(
        [str(SIL), "run"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


@pytest.mark.slow
def test_random_process_group_kills_resume_to_the_identical_result(tmp_path: Path) -> None:
    reference_root = make_workspace(tmp_path / "reference")
    assert run_sil(reference_root).returncode == 0
    reference = outcome(reference_root)
    root = make_workspace(tmp_path / "attacked")
    rng = random.Random(SEED)
    kills = 0
    for _ in range(TRIALS):
        if kill_group_after(root, rng.uniform(*DELAY_S)) == 0:
            break  # finished before the kill
        kills += 1
    final = run_sil(root)
    assert final.returncode == 0, final.stderr[-800:]
    print(f"{kills} process-group kills, then a clean resume")
    assert kills >= TRIALS // 2
    assert outcome(root) == reference
    assert verify_run_ledger(run_dir(root) / "ledger.jsonl", root).ok
    assert not [p for p in (root / "state").rglob("*.tmp") if LOOP_TEMP.match(p.name)]
