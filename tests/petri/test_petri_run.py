"""`sil run --backend petri` end to end with offline models (slow: a dozen real Petri audits)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sil.integrity import ledger
from tests.petri_support import OFFLINE_CONTRACT, REPO


@pytest.mark.slow
def test_sil_run_petri_offline_completes_a_small_experiment(tmp_path: Path) -> None:
    shutil.copytree(REPO / "measurement", tmp_path / "measurement")
    shutil.copytree(REPO / "state" / "policies", tmp_path / "state" / "policies")
    text = OFFLINE_CONTRACT.read_text().replace("max_audits: 24", "max_audits: 12")
    (tmp_path / "program.md").write_text(text.replace("{never: 6, gate: 16}", "{never: 4, gate: 5}"))
    sil = Path(sys.executable).parent / "sil"
    proc = subprocess.run(
        [str(sil), "run", "-c", "program.md", "--backend", "petri"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    [run_dir] = [p for p in (tmp_path / "state" / "runs").iterdir() if not p.name.startswith(".")]
    assert ledger.verify_file(run_dir / "ledger.jsonl").ok
    records = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    probe = next(r["payload"] for r in records if r["type"] == "probe")
    assert probe["passed"] and len(probe["probes"]) == 7
    audits = [r["payload"] for r in records if r["type"] == "audit"]
    assert len(audits) >= 6 and all(a["status"] == "ok" and not a["simulated"] for a in audits)
    assert all(a["log_path"].endswith(".eval") and Path(a["log_path"]).is_file() for a in audits)
    assert any(r["type"] == "verdict" for r in records)
    # the LLM mutator (scripted) proposed from this run's Petri evidence, and said which
    calls = [r["payload"] for r in records if r["type"] == "mutator_call"]
    audit_ids = {a["audit_id"] for a in audits}
    cited = [c for call in calls for c in call["citations"]]
    assert calls and cited and all(c.split("/")[0].removeprefix("audit:") in audit_ids for c in cited)
