"""Crash matrix: SIGKILL `sil run` at the steps of an iteration, resume, compare with a clean run.

Each kill uses the test-only fault injection (`sil/base/faults.py`, `SIL_CRASH_AT=<point>:<k>`).
After the resumed run completes, it must match a run that was never killed (same contract and
seeds): the same (mutation, verdict) sequence, the same audits with the same scores, each audit
executed exactly once unless it had genuinely not finished when killed (then it was re-run
once, with a `recovery` record saying so), one audit record per audit id, each arm's champion
equal to its last KEEP, a ledger that verifies against its checkpoints, every candidate
reachable in git refs, no leftover temp file, and the user's branch, HEAD, index and tracked
files untouched.

    pytest tests/crash/test_crash_matrix.py              # one chain of kills through a whole run (~40 s)
    pytest -m slow tests/crash/test_crash_matrix.py      # every kill point in its own run (~5 min)
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sil.base.faults import CRASH_ENV, CRASH_POINTS
from sil.exec import attempts, zygote
from sil.integrity import ledger
from sil.integrity.records import Keys
from sil.integrity.verify import verify_run_ledger
from sil.store.policyrefs import candidate_ref, champion_ref
from sil.store.runstate import RunState
from tests.conftest import REPO, edit_contract

SIL = Path(sys.executable).parent / "sil"
RUN_TIMEOUT_S = 240
# A tiny contract: all three arms, a few candidates, no simulated crashes (only ours).
TINY = {
    "max_audits: 500": "max_audits: 30",
    "arm_audits: {never: 24, random: 20, gate: 130}": "arm_audits: {never: 4, random: 4, gate: 14}",
    "final_check_rounds: 4": "final_check_rounds: 1",
    "certify_rounds: 70": "certify_rounds: 1",
    "certify_random: true": "certify_random: false",  # tests of the random arm certify it themselves
    "baseline_k: 5": "baseline_k: 1",
    "calibration_pairs: 12": "calibration_pairs: 2",
    "replicate_k: 48": "replicate_k: 2",
    "max_consecutive_gaps: 3": "max_consecutive_gaps: 3\n  max_candidates_per_arm: 3",
    "p_crash: 0.01": "p_crash: 0.0",
}
GIT_ENV = {
    "GIT_AUTHOR_NAME": "user",
    "GIT_AUTHOR_EMAIL": "user@example.org",
    "GIT_COMMITTER_NAME": "user",
    "GIT_COMMITTER_EMAIL": "user@example.org",
}
LOOP_TEMP = re.compile(r"^\..+\.[0-9a-f]{12}\.tmp$")
# One chain through a whole run: each entry kills the resumed process at its k-th visit of a
# point; True also kills the audits left running (as a power cut would), so they are re-run.
CHAIN = [
    ("audit.running", 2, False),  # baseline audit mid-flight; it finishes on its own
    ("audit.between_records", 2, False),  # half of an A/A round recorded
    ("propose.after_call", 1, False),  # mutator answered, nothing recorded: replayed, not re-paid
    ("apply.before_write", 1, False),  # random candidate: intent recorded, file not written
    ("round.before_record", 1, False),  # audits recorded, round statistic not stored
    ("verdict.before_save", 1, False),  # verdict recorded, state not saved
    ("settle.before_refs", 1, False),  # revert/promote file written, git refs not yet
    ("audit.running", 1, True),  # audits mid-flight and then lost with the machine
    ("settle.before_save", 2, False),  # settled and recorded, state not saved
]


def make_workspace(root: Path) -> Path:
    """A user's project: a git repo with one commit of their files, on branch `main`."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "program.md", root / "program.md")
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    for old, new in TINY.items():
        edit_contract(root / "program.md", old, new)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "user's project")
    return root


def git(root: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env, text=True).stdout


def user_git_view(root: Path) -> dict[str, str]:
    """What the user sees of their repo: branch, HEAD, index and tracked files."""
    return {
        "branch": git(root, "symbolic-ref", "HEAD").strip(),
        "head": git(root, "rev-parse", "HEAD").strip(),
        "index": hashlib.sha256(git(root, "ls-files", "-s").encode()).hexdigest(),
        "tracked": git(root, "status", "--porcelain", "--untracked-files=no"),
        "branches": git(root, "for-each-ref", "refs/heads", "--format=%(refname) %(objectname)"),
    }


def run_sil(root: Path, crash: str | None = None, cold: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV and not k.startswith("SIL_SIGN")}
    if crash:
        env[CRASH_ENV] = crash
    if cold:  # plain-subprocess audits (~1 s of start-up each): still running when the kill lands
        env[zygote.DISABLE_ENV] = "0"
    return subprocess.run([str(SIL), "run"], cwd=root, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def kill_orphan_audits(root: Path) -> int:
    """SIGKILL the process groups of audits still running under `root` (a lost machine)."""
    killed = 0
    prefix = str((root / "state" / "runs").resolve())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            if cwd.startswith(prefix):
                os.killpg(os.getpgid(int(entry.name)), signal.SIGKILL)
                killed += 1
        except OSError:
            continue
    return killed


def kill_at(root: Path, point: str, k: int, lose_audits: bool = False) -> None:
    proc = run_sil(root, f"{point}:{k}", cold=lose_audits)
    assert proc.returncode == -signal.SIGKILL, (
        f"{point}:{k} was not reached (exit {proc.returncode}): {proc.stderr[-800:]}"
    )
    if lose_audits:
        kill_orphan_audits(root)


def run_dir(root: Path) -> Path:
    (path,) = [p for p in (root / "state" / "runs").iterdir() if not p.name.startswith(".")]  # not .locks
    return path


def outcome(root: Path) -> dict:
    """What a completed run decided and measured, for comparison across runs."""
    rdir = run_dir(root)
    recs = list(ledger.read_records(rdir / "ledger.jsonl"))
    state = RunState.load(rdir)
    return {
        "verdicts": [(r.payload["mutation_id"], r.payload["verdict"]) for r in recs if r.type == "verdict"],
        "scores": {r.payload["audit_id"]: r.payload["scores"] for r in recs if r.type == "audit"},
        "champions": {arm: s.champion.set_id for arm, s in state.arms.items()},
        "ref_trees": {
            ref.removeprefix(f"refs/sil/{state.run_id}/"): tree
            for ref, tree in _sil_ref_trees(root, state.run_id).items()
        },
    }


def _sil_ref_trees(root: Path, run_id: str) -> dict[str, str]:
    out = git(root, "for-each-ref", f"refs/sil/{run_id}/", "--format=%(refname) %(objectname)")
    refs = dict(line.split() for line in out.splitlines())
    return {
        ref: git(root, "rev-parse", f"{commit}^{{tree}}").strip()
        for ref, commit in refs.items()
        if not ref.endswith("/checkpoints")
    }


def check_resumed(root: Path, reference: dict, view_before: dict[str, str]) -> dict:
    """Run to completion without a fault, then check every crash-safety property."""
    proc = run_sil(root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return check_run(root, reference, view_before)


def check_run(root: Path, reference: dict, view_before: dict[str, str]) -> dict:
    """Every crash-safety property of a completed run; returns counts for the caller's asserts."""
    rdir = run_dir(root)
    state = RunState.load(rdir)
    assert state.phase == "done", state.halt_reason
    recs = list(ledger.read_records(rdir / "ledger.jsonl"))
    got = outcome(root)
    assert got["verdicts"] == reference["verdicts"]
    assert got["scores"] == reference["scores"]
    assert got["champions"] == reference["champions"]
    assert got["ref_trees"] == reference["ref_trees"]

    audit_ids = [r.payload["audit_id"] for r in recs if r.type == "audit"]
    assert len(audit_ids) == len(set(audit_ids)), "an audit was recorded twice"
    planned = {a for r in recs if r.type == "intent" and r.payload["action"] == "audit" for a in r.payload["audit_ids"]}
    on_disk = {p.name for p in (rdir / "audits").iterdir()}
    assert set(audit_ids) == planned == on_disk
    probes = sum(1 for r in recs if r.type == "probe")
    assert state.audits == len(audit_ids) + probes
    died = {}
    for r in recs:
        if r.type == "recovery" and r.payload.get("found") == "died":
            died[r.payload["audit_id"]] = died.get(r.payload["audit_id"], 0) + 1
    for audit_dir in [rdir / "audits" / a for a in audit_ids] + sorted(rdir.glob("preflight-*/audit")):
        status = attempts.read_status(audit_dir)
        assert status.executions == 1, f"{audit_dir.name} ran {status.executions} times"
        assert status.launches == 1 + died.get(audit_dir.name, 0) + died.get(audit_dir.parent.name, 0), (
            f"{audit_dir.name} was launched {status.launches} times"
        )

    for arm, arm_state in state.arms.items():
        keeps = [
            r.payload["candidate_set"]
            for r in recs
            if r.type == "verdict" and r.payload["arm"] == arm and r.payload["verdict"] == "keep"
        ]
        assert arm_state.champion.set_id == (keeps[-1] if keeps else state.origin.set_id)

    check_intents_precede_effects(recs)
    report = verify_run_ledger(rdir / "ledger.jsonl", root)
    assert report.ok and report.checkpoints >= 1, report.errors
    check_refs(root, rdir, state, recs)
    leftovers = [
        p
        for p in rdir.rglob("*.tmp")
        if LOOP_TEMP.match(p.name) or not any(x.startswith(attempts.SET_ASIDE_PREFIX) for x in p.parts)
    ]
    assert not leftovers, leftovers
    assert user_git_view(root) == view_before
    return {"died": sum(died.values()), "recoveries": sum(1 for r in recs if r.type == "recovery")}


def check_intents_precede_effects(recs: list) -> None:
    """Every audit, apply, promote and revert in the ledger comes after its intent record."""
    intents: set[tuple[str, str]] = set()
    for r in recs:
        if r.type == "intent" and r.payload["action"] == "audit":
            intents.update(("audit", a) for a in r.payload["audit_ids"])
        elif r.type == "intent":
            intents.add((r.payload["action"], r.payload["key"]))
        elif r.type == "audit":
            assert ("audit", r.payload["audit_id"]) in intents, r.payload["audit_id"]
        elif r.type == "applied":
            assert ("apply", Keys.candidate(r.payload["arm"], r.payload["mutation_id"])) in intents
        elif r.type in ("promote", "revert"):
            assert (r.type, Keys.candidate(r.payload["arm"], r.payload["mutation_id"])) in intents


def check_refs(root: Path, rdir: Path, state: RunState, recs: list) -> None:
    """Every candidate's ref holds its stored policy bytes; champion refs hold the champions."""
    for r in (r for r in recs if r.type == "verdict"):
        tree = set_bytes_in_git(root, candidate_ref(state.run_id, r.payload["arm"], r.payload["mutation_id"]))
        assert tree == set_bytes_on_disk(rdir, r.payload["candidate_set"])
    for arm in ("random", "gate"):
        tree = set_bytes_in_git(root, champion_ref(state.run_id, arm))
        assert tree == set_bytes_on_disk(rdir, state.arms[arm].champion.set_id)


def set_bytes_in_git(root: Path, ref: str) -> dict[str, bytes]:
    names = git(root, "ls-tree", "--name-only", ref).split()
    return {
        n: subprocess.run(
            ["git", "-C", str(root), "cat-file", "blob", f"{ref}:{n}"], check=True, capture_output=True
        ).stdout
        for n in names
    }


def set_bytes_on_disk(rdir: Path, set_id: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (rdir / "sets" / set_id).iterdir()}


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The same contract run once without any kill, in a repo with the user's staged work."""
    root = make_workspace(tmp_path_factory.mktemp("reference") / "ws")
    (root / "notes.txt").write_text("the user's staged work\n")
    git(root, "add", "notes.txt")
    before = user_git_view(root)
    proc = run_sil(root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root, before


@pytest.fixture(scope="module")
def reference(clean) -> dict:
    result = outcome(clean[0])
    assert any(v == "keep" for _, v in result["verdicts"]), "the tiny run should keep something"
    assert any(v == "revert" for _, v in result["verdicts"])
    return result


def test_every_kill_point_is_named_once() -> None:
    assert len(CRASH_POINTS) == len(set(CRASH_POINTS))
    assert {p for p, _, _ in CHAIN} <= set(CRASH_POINTS)


@pytest.mark.slow  # about 60 s; .ci/run runs it after make test
def test_chain_of_kills_through_one_run(tmp_path: Path, reference: dict) -> None:
    root = make_workspace(tmp_path / "ws")
    before = user_git_view(root)
    for point, k, lose_audits in CHAIN:
        kill_at(root, point, k, lose_audits)
    counts = check_resumed(root, reference, before)
    assert counts["recoveries"] >= 2  # an audit found finished after a kill, one found dead
    assert counts["died"] >= 1


@pytest.mark.slow  # a whole run or real audits: .ci/run runs it after make test
def test_unknown_audit_state_halts_then_resumes(tmp_path: Path, reference: dict) -> None:
    """An attempts log the loop cannot read: halt with "unknown", resume once it is restored."""
    root = make_workspace(tmp_path / "ws")
    before = user_git_view(root)
    kill_at(root, "audit.running", 2, lose_audits=True)  # the baseline audit, mid-flight
    (audit_dir,) = (run_dir(root) / "audits").iterdir()
    log = audit_dir / attempts.ATTEMPTS_FILE
    intact = log.read_bytes()
    log.write_bytes(intact + b"{scrambled\n")
    halted = run_sil(root)
    assert halted.returncode == 3, halted.stderr[-1000:]
    state = RunState.load(run_dir(root))
    assert state.phase == "halted" and state.halt_reason.startswith("unknown:")
    assert not (audit_dir / f"{attempts.SET_ASIDE_PREFIX}1").exists()  # nothing touched
    halts = [r for r in ledger.read_records(run_dir(root) / "ledger.jsonl") if r.type == "halt"]
    assert halts[-1].payload["reason"].startswith("unknown:")
    log.write_bytes(intact)  # the operator establishes what happened
    check_resumed(root, reference, before)


@pytest.mark.slow
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_kill_point(point: str, tmp_path: Path, reference: dict) -> None:
    root = make_workspace(tmp_path / "ws")
    before = user_git_view(root)
    kill_at(root, point, 1)
    check_resumed(root, reference, before)


@pytest.mark.slow
@pytest.mark.parametrize(
    "point",
    [
        "audit.running",
        "audit.before_result",
        "audit.between_records",
        "round.before_record",
        "state.before_save",
        "state.after_save",
    ],
)
def test_kill_point_late_in_the_gate_arm(point: str, tmp_path: Path, reference: dict) -> None:
    """Points visited by every round, hit late (gate arm confirmations, final checks)."""
    root = make_workspace(tmp_path / "ws")
    before = user_git_view(root)
    kill_at(root, point, {"audit.running": 14, "state.before_save": 40, "state.after_save": 40}.get(point, 7))
    check_resumed(root, reference, before)


@pytest.mark.slow
def test_audits_lost_with_the_machine_are_rerun_once(tmp_path: Path, reference: dict) -> None:
    root = make_workspace(tmp_path / "ws")
    before = user_git_view(root)
    for k in (2, 3, 5):
        kill_at(root, "audit.running", k, lose_audits=True)
    counts = check_resumed(root, reference, before)
    assert counts["died"] >= 3


@pytest.mark.slow  # a whole run: .ci/run runs it after make test, keeping the default suite under 6 min
def test_user_repo_untouched_and_refs_hold_the_policy_bytes(clean, reference: dict) -> None:
    """A run without faults: only refs/sil/* is written; the refs resolve to the policy bytes."""
    root, before = clean
    counts = check_run(root, reference, before)
    assert counts["recoveries"] == 0
    assert (root / "notes.txt").read_text() == "the user's staged work\n"
    rdir = run_dir(root)
    state = RunState.load(rdir)
    keeps = [r.payload for r in ledger.read_records(rdir / "ledger.jsonl") if r.type == "promote"]
    assert keeps and all(k["commit"] for k in keeps)
    for k in keeps:  # the ledger names the commit that holds the kept candidate
        assert git(root, "rev-parse", candidate_ref(state.run_id, k["arm"], k["mutation_id"])).strip() == k["commit"]
    lineage = git(root, "rev-list", "--first-parent", champion_ref(state.run_id, "random")).split()
    assert len(lineage) == state.arms["random"].keeps + 1  # the KEEPs back to the origin
