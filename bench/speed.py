"""Speed of the everyday loop, written to docs/results/speed.md by this command.

Measures, in one run and under the same machine load: the loop's overhead per simulated audit
through the warm worker (sil/exec/zygote.py) and through the plain subprocess (wall time of
`measure.run_audit` minus the audit's own work, which is the simulated runtime's `main()` timed
in-process on the same inputs), that both give byte-identical evidence; the start time of
`sil --version` (`python -m bench.startup` times `runs` and `status` on a finished run); the
default run (`sil run`, as `make run` runs it) in a fresh clone of HEAD; optionally `make run`'s
install on a fresh clone and the default test suite, alone and beside busy-looping processes.
Every figure is a wall-clock time on this machine, with its load average next to it.

    python -m bench.speed                      # audits, sil --version, the default run (~2 min)
    python -m bench.speed --install --suite    # also a fresh-clone install and the suite (long)
    python -m bench.speed --suite --hogs 2     # ... and the suite again beside 2 busy-looping processes
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sil.exec.measure import AuditRequest, MeasureContext

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "results" / "speed.md"
SIL = Path(sys.executable).parent / "sil"


@dataclass(frozen=True)
class Figure:
    """One measured line of the results table."""

    what: str
    value: str
    load: str  # 1-minute load average before -> after
    note: str = ""


def load() -> float:
    return os.getloadavg()[0]


@contextlib.contextmanager
def measured(figures: list[Figure], what: str) -> Iterator[dict[str, str]]:
    """Collects one figure; the block fills `value` (and `note`), the load is read around it."""
    slot: dict[str, str] = {}
    before = load()
    yield slot
    figures.append(Figure(what, slot["value"], f"{before:.1f} -> {load():.1f}", slot.get("note", "")))


def workspace(root: Path) -> Path:
    root.mkdir(parents=True)
    shutil.copy(REPO / "program.md", root / "program.md")
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    return root


def audit_overhead(n: int, figures: list[Figure]) -> None:
    """Per-audit loop overhead, warm worker vs plain subprocess, alternating under the same load."""
    from sil.contract.schema import load_contract
    from sil.exec import measure, zygote
    from sil.exec.backends.sim import SimBackend
    from sil.policies.store import PolicyStore

    before = load()
    with tempfile.TemporaryDirectory(prefix="sil-speed-") as tmp:
        ws = workspace(Path(tmp) / "ws")
        ctx = measure.MeasureContext.from_contract(load_contract(ws / "program.md").contract, ws)
        store = PolicyStore(ws / "run")
        ps = store.snapshot_dir(ws / "state" / "policies")
        started = time.monotonic()
        worker = zygote.shared((SimBackend.warm_module,), measure.base_env())
        if worker is None:
            raise SystemExit("the warm worker is unavailable here (needs fork and /proc; SIL_WARM_AUDITS=0?)")
        start_s = time.monotonic() - started
        walls: dict[str, list[float]] = {"warm": [], "cold": []}
        own, same = [], 0
        for i in range(n + 1):  # the first round warms caches and is not counted
            reqs = {}
            for mode in ("warm", "cold") if i % 2 else ("cold", "warm"):
                runner = measure.LocalRunner(worker if mode == "warm" else None)
                req = measure.AuditRequest(
                    audit_id=f"a{i}",
                    audit_dir=ws / mode / f"a{i}",
                    policy_dir=store.set_dir(ps),
                    policy_hashes=ps.hashes,
                    tick=i,
                )
                t = time.monotonic()
                res = measure.run_audit(req, ctx, SimBackend(), runner)
                if i:
                    walls[mode].append(time.monotonic() - t)
                assert res.ok, res.gap_reason
                reqs[mode] = req
            if i:
                own.append(own_work(reqs["warm"], ctx, Path(tmp) / "own" / str(i)))
                same += (reqs["warm"].audit_dir / "evidence.json").read_bytes() == (
                    reqs["cold"].audit_dir / "evidence.json"
                ).read_bytes()
        report_overhead(figures, walls, own, same, n, start_s, before)


def own_work(req: AuditRequest, ctx: MeasureContext, scratch: Path) -> float:
    """Wall time of the simulated audit's own work: its `main()` in this process, same inputs, cold caches."""
    from sil_policy import SURFACES
    from sil_policy.evidence import AUDIT_DIR_ENV
    from sil_runtime.sim import world

    sim_main = importlib.import_module("sil_runtime.sim.__main__")
    scratch.mkdir(parents=True)
    env = {AUDIT_DIR_ENV: str(scratch)}
    for spec in SURFACES.values():
        env[spec.override_env] = str(req.audit_dir / "policy" / spec.filename)
        env[spec.strict_env] = "1"
    argv = ["--measurement", str(ctx.measurement_root), "--params", str(req.audit_dir / "sim_params.json")]
    argv += ["--tick", str(req.tick), "--pair-key", req.audit_id, "--audit-id", req.audit_id]
    argv += ["--judge-resamples", str(ctx.contract.measurement.judge_resamples), "--seed-set", req.seed_set]
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        world._expected_score_table.cache_clear()  # a fresh audit process starts without it
        t = time.monotonic()
        assert sim_main.main(argv) == 0
        return time.monotonic() - t
    finally:
        os.environ.clear()
        os.environ.update(saved)


def report_overhead(
    figures: list[Figure],
    walls: dict[str, list[float]],
    own: list[float],
    same: int,
    n: int,
    start_s: float,
    before: float,
) -> None:
    work = statistics.median(own)
    over = {mode: statistics.median(w) - work for mode, w in walls.items()}
    now = f"{before:.1f} -> {load():.1f}"
    figures.append(Figure("warm worker start (once per run)", f"{start_s:.2f} s", now))
    figures.append(Figure("audit's own work (sim main(), median)", f"{work * 1000:.0f} ms", now, f"{n} audits"))
    for mode, label in (("warm", "warm worker"), ("cold", "plain subprocess")):
        med = statistics.median(walls[mode])
        figures.append(
            Figure(
                f"per-audit loop overhead, {label}",
                f"{over[mode] * 1000:.0f} ms",
                now,
                f"median audit wall {med * 1000:.0f} ms minus own work",
            )
        )
    ratio = over["cold"] / over["warm"] if over["warm"] > 0 else float("inf")
    figures.append(Figure("overhead ratio, subprocess / warm worker", f"{ratio:.1f}x", now, "same run, alternating"))
    figures.append(Figure("evidence byte-identical (warm vs subprocess)", f"{same} of {n}", now))


def start_up(figures: list[Figure], args: list[str], runs: int = 5) -> None:
    """Median wall time of `sil ARGS`."""
    times = []
    with measured(figures, f"`sil {' '.join(args)}` start (median of {runs})") as slot:
        for _ in range(runs):
            t = time.monotonic()
            subprocess.run([str(SIL), *args], check=True, capture_output=True)
            times.append(time.monotonic() - t)
        slot["value"] = f"{statistics.median(times):.2f} s"
        slot["note"] = f"min {min(times):.2f} s, max {max(times):.2f} s"


def as_make_runs_it() -> dict[str, str]:
    """The environment `make run` and `make test` give Python: the Makefile exports it so."""
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}


def fresh_clone(dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(REPO), str(dest)], check=True)
    return dest


def default_run(figures: list[Figure], root: Path) -> None:
    clone = fresh_clone(root / "run-clone")
    with measured(figures, "default run `sil run` (fresh clone, installed venv)") as slot:
        t = time.monotonic()
        proc = subprocess.run([str(SIL), "run"], cwd=clone, capture_output=True, text=True, env=as_make_runs_it())
        wall = time.monotonic() - t
        audits = re.search(r"audits (\d+) \(gaps (\d+)\)", proc.stdout)
        slot["value"] = f"{wall:.1f} s"
        slot["note"] = f"exit {proc.returncode}" + (f", {audits[1]} audits ({audits[2]} gaps)" if audits else "")


def make_run_install(figures: list[Figure], root: Path) -> None:
    """`make run` on a fresh clone, its install (venv + `pip install -e .`) and its run timed apart."""
    clone = fresh_clone(root / "make-clone")
    with measured(figures, "`make run` install on a fresh clone (venv + pip install -e .)") as slot:
        t = time.monotonic()
        proc = subprocess.run(["make", ".venv/.installed-run"], cwd=clone, capture_output=True, text=True)
        slot["value"] = f"{time.monotonic() - t:.0f} s"
        slot["note"] = f"exit {proc.returncode}; pip's cache as found"
    with measured(figures, "`make run` run part (same fresh clone)") as slot:
        t = time.monotonic()
        proc = subprocess.run(["make", "run"], cwd=clone, capture_output=True, text=True)
        slot["value"] = f"{time.monotonic() - t:.1f} s"
        slot["note"] = f"exit {proc.returncode}"


def suite(figures: list[Figure], hogs: int = 0) -> None:
    """The default suite, optionally beside `hogs` busy-looping processes (a machine under load)."""
    what = "default test suite `python -m pytest` (as `make test` runs it)" + (
        f" beside {hogs} CPU hog(s)" if hogs else ""
    )
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        with measured(figures, what) as slot:
            t = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "pytest"], cwd=REPO, capture_output=True, text=True, env=as_make_runs_it()
            )
            tail = [line for line in proc.stdout.splitlines() if line.strip()][-1:] or ["(no output)"]
            slot["value"] = f"{(time.monotonic() - t) / 60:.1f} min"
            slot["note"] = f"exit {proc.returncode}: {tail[0][-120:]}"
    finally:
        for b in busy:
            b.kill()
            b.wait()


def header(command: str, runs: str) -> list[str]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], cwd=REPO, capture_output=True, text=True)
    cpu = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")), "?")
    return [
        "# Speed of the everyday loop",
        "",
        f"- command: `{command}`",
        f"- date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- commit: {commit.stdout.strip()}{' (with uncommitted changes)' if dirty.stdout.strip() else ''}",
        f"- runs: {runs}",
        f"- machine: {platform.node()}, {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}",
        f"- load average at start (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}",
        "",
        "Wall-clock times on this machine; each row shows the 1-minute load average around it. On a",
        "shared or busy machine every figure is slower than on an idle one.",
        "",
    ]


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def render(head: list[str], figures: list[Figure]) -> str:
    rows = ["| what | value | load 1-min | note |", "|---|---|---|---|"]
    rows += [f"| {f.what} | {f.value} | {f.load} | {f.note} |" for f in figures]
    return "\n".join(head + rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.speed", description=__doc__.split("\n")[0])
    ap.add_argument("--audits", type=int, default=20, help="audits per path for the overhead (default 20)")
    ap.add_argument("--no-run", action="store_true", help="skip the default run")
    ap.add_argument("--install", action="store_true", help="also time `make run`'s install on a fresh clone")
    ap.add_argument("--suite", action="store_true", help="also time the default test suite (long)")
    ap.add_argument("--hogs", type=int, default=0, help="with --suite: also run it beside this many CPU hogs")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT.relative_to(REPO)})")
    args = ap.parse_args(argv)
    head = header(
        "python -m bench.speed " + " ".join(argv if argv is not None else sys.argv[1:]),
        f"{args.audits} audits per path for the overhead, one default run, 5 start-ups",
    )
    figures: list[Figure] = []
    audit_overhead(args.audits, figures)
    start_up(figures, ["--version"])
    with tempfile.TemporaryDirectory(prefix="sil-speed-") as tmp:
        if not args.no_run:
            default_run(figures, Path(tmp))
        if args.install:
            make_run_install(figures, Path(tmp))
    if args.suite:
        suite(figures)
        if args.hogs:
            suite(figures, args.hogs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(head, figures))
    print(render(head, figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
