"""One reading of a run (issue 34 item 3, issue 39 item 1, issue 40 item 4).

`sil runs`, `sil status` (and `--json`), `sil report` and `sil ledger verify` read a run through
one verifier and one record model: every figure comes from the verified ledger or a snapshot the
ledger vouches for. Tried as an attacker would: an edited state.json or contract.json is reported
as disagreeing with the ledger in every view, and `sil run` refuses it; a ledger whose signed
checkpoints are gone, stripped or forged is never "ok" where `sil ledger verify` refuses it; one
odd or hostile run folder is listed with its reason and hides no other run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sil.integrity import ledger
from sil.integrity.gitrefs import PROJECT_REF
from tests.review.test_review import RUN, copy_of, done  # noqa: F401 - the shared finished run

ENV_KEYS = ("SIL_ALLOWED_SIGNERS", "SIL_WITNESS", "SIL_SIGNING_KEY", "SIL_SIGNER")


def sil(root: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """`sil ARGS` in a fresh interpreter, as a user runs it (a hang fails the test)."""
    base = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    code = "import sys; from sil.cli.app import app; sys.argv = ['sil', *sys.argv[1:]]; app()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=root,
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=timeout,
    )


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr + proc.stdout and "──────" not in proc.stderr, proc.stderr[-2000:]


def _json_edit(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _relink(lines: list[bytes], run_id: str | None = None) -> bytes:
    """The records again as a valid chain (seq, prev, hash recomputed), under `run_id` if given."""
    out, prev = [], ledger.GENESIS
    for n, line in enumerate(lines):
        fields = {k: v for k, v in json.loads(line).items() if k != "hash"}
        fields.update(seq=n, prev=prev, **({"run_id": run_id} if run_id else {}))
        fields["hash"] = prev = ledger.record_hash(fields)
        out.append(ledger.canonical(fields) + b"\n")
    return b"".join(out)


def clone_run(root: Path, new: str, source: str = RUN) -> Path:
    """Another finished run of the project: the source run's folder under a new id, its ledger
    relinked as that run's (no checkpoints of its own: a ledger that verifies unanchored)."""
    src, dst = root / "state" / "runs" / source, root / "state" / "runs" / new
    shutil.copytree(src, dst, symlinks=True)
    (dst / "ledger.jsonl").write_bytes(_relink((src / "ledger.jsonl").read_bytes().splitlines(), new))
    _json_edit(dst / "state.json", lambda d: d.update(run_id=new))
    return dst


# ---- snapshots edited against the ledger -------------------------------------------------------


def _unreadable_state(d: dict) -> None:
    del d["measurement_hash"]
    d["tick"] = "x"


def _counters(d: dict) -> None:
    d["audits"] = 3
    d["arms"]["gate"]["keeps"] = 7


def _budget(d: dict) -> None:
    d["budget"]["max_audits"] = 99999
    d["budget"]["max_usd"] = 123


EDITS = {
    "state.json unreadable": ("state.json", _unreadable_state, "does not hold a run state"),
    "state.json counters": ("state.json", _counters, "state.json disagrees with the ledger: audits 3"),
    "contract.json budget": ("contract.json", _budget, "contract.json is not the contract the ledger records"),
}


SLOW_EDITS = {"state.json counters", "contract.json budget"}  # seven CLI processes each: .ci/run runs them


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW_EDITS else []) for n in EDITS])
def test_an_edited_snapshot_disagrees_with_the_ledger_in_every_view(copy_of, name: str) -> None:  # noqa: F811
    file, change, reason = EDITS[name]
    _json_edit(copy_of / "state" / "runs" / RUN / file, change)
    runs = sil(copy_of, "runs")
    assert runs.returncode == 0 and "FAILS" in runs.stdout and reason[:30] in runs.stdout.replace("\n", " ")
    assert "│ ok" not in runs.stdout and "gate 7" not in runs.stdout
    row = json.loads(sil(copy_of, "runs", "--json").stdout)[0]
    assert not row["verified"] and reason in row["verify_note"] and row["audits"] != 3
    status = sil(copy_of, "status", RUN)
    assert "LEDGER DOES NOT VERIFY" in status.stdout and reason[:30] in status.stdout.replace("\n", " ")
    assert "99999" not in status.stdout and "of 123" not in status.stdout or name != "contract.json budget"
    as_json = json.loads(sil(copy_of, "status", RUN, "--json").stdout)
    assert not as_json["verified"] and any(reason in p for p in as_json["problems"])
    report = sil(copy_of, "report", RUN)
    _no_traceback(report)
    if report.returncode == 0:
        text = (copy_of / "state" / "runs" / RUN / "report" / "report.md").read_text()
        assert reason in text
    else:
        assert reason in report.stderr.replace("\n", " ")
    run = sil(copy_of, "run", "--run-id", RUN, timeout=300)
    _no_traceback(run)
    assert run.returncode == 2 and "cannot be resumed" in run.stderr and reason[:30] in run.stderr.replace("\n", " ")
    for proc in (runs, status):
        _no_traceback(proc)


def test_a_run_whose_snapshots_agree_verifies_in_every_view(copy_of) -> None:  # noqa: F811
    row = json.loads(sil(copy_of, "runs", "--json").stdout)[0]
    assert row["verified"] and row["verify_note"].startswith(f"{row['verify_note'].split()[0]} records")
    status = sil(copy_of, "status", RUN)
    assert status.returncode == 0 and "ledger verifies:" in status.stdout.splitlines()[1]
    assert json.loads(sil(copy_of, "status", "--json").stdout)["verified"]


# ---- trust the run declared (issue 39 item 1, issue 40 item 4) ---------------------------------


def _git(root: Path, *args: str, data: bytes | None = None) -> str:
    return (
        subprocess.run(["git", "-C", str(root), *args], input=data, capture_output=True, check=True)
        .stdout.decode()
        .strip()
    )


def _anchor(root: Path) -> Path:
    return root if (root / ".git").exists() else root / "state" / "anchors.git"


def _declare_signed(root: Path) -> None:
    """The run as one that declared signed checkpoints (its chain relinked, its refs kept)."""
    path = root / "state" / "runs" / RUN / "ledger.jsonl"
    lines = path.read_bytes().splitlines()
    first = json.loads(lines[0])
    first["payload"]["trust"] = {"signed": True, "signer": "alice", "key_fingerprints": ["SHA256:x"]}
    path.write_bytes(_relink([json.dumps(first).encode(), *lines[1:]]))


def _refs_deleted(root: Path) -> None:
    _declare_signed(root)
    _git(_anchor(root), "update-ref", "-d", f"refs/sil/{RUN}/checkpoints")


def _forged_unsigned(root: Path) -> None:
    """One unsigned checkpoint over the whole (relinked) ledger, replacing the run's."""
    from sil.integrity.checkpoint import write_checkpoint

    _refs_deleted(root)
    write_checkpoint(root / "state" / "runs" / RUN / "ledger.jsonl", _anchor(root), None)


def _signed_by_an_outsider(root: Path) -> None:
    """One checkpoint signed as alice, but with a key the allowed signers do not hold for her."""
    from sil.base.sshsig import Signer, generate_key
    from sil.integrity.checkpoint import write_checkpoint

    _refs_deleted(root)
    mallory = generate_key(root.parent / "mallory", "mallory")
    write_checkpoint(root / "state" / "runs" / RUN / "ledger.jsonl", _anchor(root), Signer(mallory, "alice"))


NO_ANCHOR = "no allowed_signers file outside the repository"
TRUST = {  # the attack, and the reason given without and with SIL_ALLOWED_SIGNERS
    "signed run, checkpoint refs deleted": (_refs_deleted, "there are none", "there are none"),
    "signed run, a forged unsigned checkpoint": (_forged_unsigned, "is unsigned", "is unsigned"),
    "signed run, signed by a key outside the allowed signers": (_signed_by_an_outsider, NO_ANCHOR, "checkpoint 1"),
}


SLOW_TRUST = {"signed run, checkpoint refs deleted", "signed run, signed by a key outside the allowed signers"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW_TRUST else []) for n in TRUST])
def test_runs_and_status_never_say_ok_where_ledger_verify_refuses(copy_of, name: str, tmp_path) -> None:  # noqa: F811
    from sil.base.sshsig import allowed_signers_line, generate_key

    attack, *reasons = TRUST[name]
    attack(copy_of)
    alice = generate_key(tmp_path / "alice", "alice")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(allowed_signers_line("alice", alice.with_suffix(".pub"), ("sil-ledger",)))
    for env, reason in zip(({}, {"SIL_ALLOWED_SIGNERS": str(allowed)}), reasons, strict=True):
        verify = sil(copy_of, "ledger", "verify", RUN, env=env)
        assert verify.returncode == 1 and reason in verify.stderr
        runs = sil(copy_of, "runs", env=env)
        assert runs.returncode == 0 and "FAILS" in runs.stdout and "ok:" not in runs.stdout
        row = json.loads(sil(copy_of, "runs", "--json", env=env).stdout)[0]
        assert not row["verified"] and reason in row["verify_note"]
        status = sil(copy_of, "status", RUN, env=env)
        assert "LEDGER DOES NOT VERIFY" in status.stdout and reason in status.stdout.replace("\n", " ")
        as_json = json.loads(sil(copy_of, "status", RUN, "--json", env=env).stdout)
        assert not as_json["verified"] and any(reason in p for p in as_json["problems"])


def test_status_of_a_tampered_or_foreign_ledger_says_it_does_not_verify(copy_of) -> None:  # noqa: F811
    path = copy_of / "state" / "runs" / RUN / "ledger.jsonl"
    lines = path.read_bytes().splitlines()
    verdict = next(i for i, line in enumerate(lines) if b'"verdict":"revert"' in line)
    lines[verdict] = lines[verdict].replace(b'"verdict":"revert"', b'"verdict":"keep"')
    path.write_bytes(_relink(lines))  # a recomputed chain: only the checkpoints can tell
    status = sil(copy_of, "status", RUN)
    assert "LEDGER DOES NOT VERIFY" in status.stdout and "rewritten chain" in status.stdout
    assert not json.loads(sil(copy_of, "status", RUN, "--json").stdout)["verified"]
    _git(_anchor(copy_of), "update-ref", "-d", PROJECT_REF)
    _git(_anchor(copy_of), "update-ref", PROJECT_REF, _new_project(copy_of))  # another project's id
    status = sil(copy_of, "status", RUN)
    assert "LEDGER DOES NOT VERIFY" in status.stdout and "belongs to project" in status.stdout


def _new_project(root: Path) -> str:
    repo = _anchor(root)
    blob = _git(repo, "hash-object", "-w", "--stdin", data=b"someone-else")
    tree = _git(repo, "mktree", data=f"100644 blob {blob}\tproject\n".encode())
    return _git(repo, "commit-tree", tree, "-m", "another project")


# ---- odd and hostile run folders --------------------------------------------------------------


def _runs(root: Path) -> Path:
    return root / "state" / "runs"


def _verdict_without_verdict(root: Path) -> str:
    d = clone_run(root, "no-verdict")
    lines = (d / "ledger.jsonl").read_bytes().splitlines()
    i = next(i for i, line in enumerate(lines) if b'"type":"verdict"' in line)
    record = json.loads(lines[i])
    del record["payload"]["verdict"]
    lines[i] = json.dumps(record).encode()
    (d / "ledger.jsonl").write_bytes(_relink(lines))
    return "(verdict) is malformed"


def _malformed_checkpoint(root: Path) -> str:
    clone_run(root, "bad-checkpoint")
    repo = _anchor(root)
    blob = _git(repo, "hash-object", "-w", "--stdin", data=b"not a checkpoint\n")
    tree = _git(repo, "mktree", data=f"100644 blob {blob}\tcheckpoint\n".encode())
    _git(repo, "update-ref", "refs/sil/bad-checkpoint/checkpoints", _git(repo, "commit-tree", tree, "-m", "x"))
    return "is malformed"


def _bad_name(root: Path) -> str:
    shutil.copytree(_runs(root) / RUN, _runs(root) / "bad name")
    return "is not allowed"


def _ledger_a_directory(root: Path) -> str:
    d = clone_run(root, "ledger-dir")
    (d / "ledger.jsonl").unlink()
    (d / "ledger.jsonl").mkdir()
    return "is a directory"


def _dangling(root: Path) -> str:
    d = clone_run(root, "dangling")
    (d / "ledger.jsonl").unlink()
    (d / "ledger.jsonl").symlink_to(root / "nowhere.jsonl")
    return "dangling symlink"


def _fifo(root: Path) -> str:
    d = clone_run(root, "fifo")
    (d / "ledger.jsonl").unlink()
    os.mkfifo(d / "ledger.jsonl")
    return "is a FIFO"


BROKEN: dict[str, Callable[[Path], str]] = {
    "no-verdict": _verdict_without_verdict,
    "bad-checkpoint": _malformed_checkpoint,
    "bad name": _bad_name,
    "ledger-dir": _ledger_a_directory,
    "dangling": _dangling,
    "fifo": _fifo,
}
GOOD = [RUN, *(f"good{n}" for n in range(2, 9))]


@pytest.fixture
def eight_and_broken(copy_of) -> tuple[Path, dict[str, str]]:  # noqa: F811
    for name in GOOD[1:]:
        clone_run(copy_of, name)
    reasons = {name: make(copy_of) for name, make in BROKEN.items()}
    return copy_of, reasons


def test_runs_lists_eight_runs_and_names_each_broken_folder_with_its_reason(eight_and_broken) -> None:
    root, reasons = eight_and_broken
    proc = sil(root, "runs", "--json", timeout=120)
    _no_traceback(proc)
    assert proc.returncode == 0
    rows = {r["run_id"]: r for r in json.loads(proc.stdout)}
    assert set(rows) == {*GOOD, *BROKEN}
    for name in GOOD:
        assert rows[name]["verified"] and rows[name]["phase"] == "done", (name, rows[name]["verify_note"])
    for name, reason in reasons.items():
        assert not rows[name]["verified"] and reason in rows[name]["verify_note"], (name, rows[name]["verify_note"])
    table = sil(root, "runs", timeout=120)
    assert table.returncode == 0 and table.stdout.count("FAILS") == len(BROKEN)
    status = sil(root, "status", "good5")
    assert status.returncode == 0 and status.stdout.startswith("run good5: done") and "ledger verifies" in status.stdout
    verify = sil(root, "ledger", "verify", "bad-checkpoint")
    _no_traceback(verify)
    assert verify.returncode == 1 and "does not verify" in verify.stderr and "is malformed" in verify.stderr


def test_a_project_ref_without_its_file_is_a_reason_not_a_traceback(copy_of) -> None:  # noqa: F811
    repo = _anchor(copy_of)
    tree = _git(repo, "mktree", data=b"")
    _git(repo, "update-ref", PROJECT_REF, _git(repo, "commit-tree", tree, "-m", "no file"))
    for args in (("runs",), ("status", RUN), ("ledger", "verify", RUN)):
        proc = sil(copy_of, *args)
        _no_traceback(proc)
        assert "cannot be read" in (proc.stdout + proc.stderr).replace("\n", " "), args


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_ledger_is_a_reason(copy_of) -> None:  # noqa: F811
    d = clone_run(copy_of, "unreadable")
    (d / "ledger.jsonl").chmod(0)
    rows = {r["run_id"]: r for r in json.loads(sil(copy_of, "runs", "--json").stdout)}
    assert rows[RUN]["verified"] and not rows["unreadable"]["verified"]
    assert "Permission denied" in rows["unreadable"]["verify_note"]


def test_the_view_cache_sees_an_edit_that_keeps_the_size_and_mtime(copy_of, tmp_path) -> None:  # noqa: F811
    env = {"SIL_CACHE_DIR": str(tmp_path / "views")}
    assert json.loads(sil(copy_of, "runs", "--json", env=env).stdout)[0]["verified"]
    assert any((tmp_path / "views").iterdir()), "the first reading was kept"
    path = copy_of / "state" / "runs" / RUN / "ledger.jsonl"
    before = path.stat()
    data = path.read_bytes()
    at = data.index(b'"verdict":"revert"')
    path.write_bytes(data[:at] + b'"verdict":"revers"' + data[at + len(b'"verdict":"revert"') :])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    row = json.loads(sil(copy_of, "runs", "--json", env=env).stdout)[0]
    assert not row["verified"] and "hash does not match" in row["verify_note"]


def test_an_interrupted_runs_state_may_lag_the_ledger_but_never_run_ahead(done) -> None:  # noqa: F811
    from sil.integrity.ledger import read_records
    from sil.store.binding import ledger_counts, snapshot_problems
    from sil.store.runstate import RunState

    run_dir = done / "state" / "runs" / RUN
    records = list(read_records(run_dir / "ledger.jsonl"))
    state = RunState.load(run_dir)
    assert state is not None and snapshot_problems(state, None, ledger_counts(records)) == []
    last_stop = max(r.seq for r in records if r.type == "stop")
    unfinished = ledger_counts(records[:last_stop])  # as if it was killed before its stop
    behind = state.model_copy(update={"audits": unfinished.audits - 1})
    assert snapshot_problems(behind, None, unfinished) == []  # a crash before the state's save
    ahead = state.model_copy(update={"audits": unfinished.audits + 1})
    assert any("audits" in p for p in snapshot_problems(ahead, None, unfinished))
    finished = ledger_counts(records)
    assert any("audits" in p for p in snapshot_problems(behind, None, finished))


@pytest.mark.parametrize("make", [_malformed_checkpoint, _fifo], ids=["malformed-checkpoint", "fifo-ledger"])
def test_sil_run_on_a_broken_run_folder_refuses_without_a_traceback(copy_of, make) -> None:  # noqa: F811
    make(copy_of)
    run_id = "bad-checkpoint" if make is _malformed_checkpoint else "fifo"
    proc = sil(copy_of, "run", "--run-id", run_id, timeout=120)
    _no_traceback(proc)
    assert proc.returncode == 2 and "cannot be resumed" in proc.stderr, proc.stderr[-500:]


def test_the_view_cache_removes_its_oldest_entries_past_its_limit(tmp_path, monkeypatch) -> None:
    from sil.review import readcache

    folder = tmp_path / "views"
    monkeypatch.setenv("SIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(readcache, "MAX_ENTRIES", 5)
    monkeypatch.setattr(readcache, "PRUNED_TO", 3)
    cache = readcache.ViewCache.__new__(readcache.ViewCache)
    cache.folder = folder
    for i in range(6):
        cache.put(f"k{i}", b"view")
        os.utime(folder / f"k{i}", ns=(i * 10**9, i * 10**9))  # written in this order
    assert sorted(p.name for p in folder.iterdir()) == ["k3", "k4", "k5"]
    assert cache.get("k5") == b"view" and cache.get("k0") is None
