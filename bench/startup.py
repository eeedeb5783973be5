"""How long `sil --version`, `sil runs` and `sil status` take to start, and what they import.

    python -m bench.startup --project /path/with/a/finished/run [--run RUN] [--repeat 5] [--baseline /path/to/other/checkout]

Writes docs/results/startup.md (command, date, commit, machine and its load, then the
median and range of each command's wall time and the heavy modules `import sil.cli.app` pulls
in). The figures depend on the machine's load, which the file records next to them; with
--baseline the same commands run from another checkout's code (e.g. main) in turn with these,
so both see the same load. `sil runs` and `sil status` are timed twice: with an empty view
cache (every run read and verified afresh, sil/review/readcache.py) and with the cache the
previous call left (nothing changed in between, as when a user looks again).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "results" / "startup.md"
CACHED = ("runs", "status")
HEAVY = ("scipy", "matplotlib", "inspect_ai", "ray", "numpy", "pandas", "pyarrow", "pydantic")


def wall(cmd: list[str], cwd: Path, code: Path | None = None, cache: Path | None = None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds `sil CMD` takes; with `code`, that checkout's CLI;
    `cache`: the view cache folder to use.

    CPU time depends less on the machine's load than wall time does: on an idle machine the
    wall time is about the CPU time."""
    env = dict(os.environ)
    if cache is not None:
        env["SIL_CACHE_DIR"] = str(cache)
    if code is not None:
        env["PYTHONPATH"] = str(code)
        cmd = [sys.executable, "-c", "from sil.cli.app import app; app()", *cmd[1:]]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, capture_output=True, check=True, env=env)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _cell(runs: list[tuple[float, float]]) -> str:
    times = [w for w, _ in runs]
    cpu = statistics.median(c for _, c in runs)
    return f"{statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} | {cpu:.2f}"


def heavy_imports(module: str) -> list[str]:
    code = f"import sys, {module}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return out.stdout.split()


def conditions(project: Path) -> list[str]:
    """What else the times depend on: how much ledger `runs` verifies, and whether Python may
    cache compiled modules (with PYTHONDONTWRITEBYTECODE set, every sil module is compiled at
    each start, as on a first run)."""
    folders = [p.parent for p in project.glob("state/runs/*/ledger.jsonl")]
    ledgers = [p / "ledger.jsonl" for p in folders if (p / "ledger.jsonl").is_file()]  # never open a FIFO
    records = sum(p.read_bytes().count(b"\n") for p in ledgers)
    size = sum(p.stat().st_size for p in ledgers) / 1e6
    cache = "off (PYTHONDONTWRITEBYTECODE is set)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
    return [
        f"- project: {len(folders)} run folders, {len(ledgers)} with a ledger file, "
        f"{records} ledger records ({size:.1f} MB) to verify",
        f"- bytecode cache: {cache}",
    ]


def _timed(
    sil: str, c: list[str], args: argparse.Namespace, cached: bool
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """`args.repeat` timings of `sil C` with this code and the baseline's, alternating so both see
    the same load; each with an empty view cache, or the one a first untimed call left."""
    mine: list[tuple[float, float]] = []
    base: list[tuple[float, float]] = []
    codes: list[tuple[Path | None, list[tuple[float, float]]]] = [(None, mine)]
    if args.baseline:
        codes.append((args.baseline, base))
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.repeat):
            for code, out in codes:
                cache = Path(tmp) / f"{code}-{n if not cached else 'kept'}"
                if cached and n == 0:
                    wall([sil, *c], args.project, code, cache)  # fills the cache
                out.append(wall([sil, *c], args.project, code, cache))
    return mine, base


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", type=Path, required=True, help="a project folder with at least one run")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", type=Path, help="another checkout (e.g. of main) to time alongside")
    ap.add_argument("--run", help="the run `sil status` shows (default: the latest)")
    ap.add_argument("--note", default="", help="how the project was made, for the results file")
    args = ap.parse_args()
    commands = (["--version"], ["runs"], ["status", *([args.run] if args.run else [])])
    sil = shutil.which("sil", path=str(Path(sys.executable).parent)) or "sil"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    load = os.getloadavg()
    lines = [
        "# Start-up time of everyday `sil` commands",
        "",
        f"- command: `python -m bench.startup --project {args.project} --repeat {args.repeat}"
        + (f" --run {args.run}" if args.run else "")
        + (f" --baseline {args.baseline}`" if args.baseline else "`"),
        f"- date: {datetime.now(UTC).isoformat(timespec='seconds')}",
        f"- commit: {commit.stdout.strip() or 'unknown'}",
        f"- runs: {args.repeat} per command",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average at start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}",
        *conditions(args.project),
        *([f"- project made: {args.note}"] if args.note else []),
        "",
        "| command | code | median wall s | min wall s | max wall s | median CPU s |",
        "|---|---|---|---|---|---|",
    ]
    for c in commands:
        for cached in (False, True) if c[0] in CACHED else (False,):
            label = f"sil {' '.join(c)}" + ((" (cache kept)" if cached else " (empty cache)") if c[0] in CACHED else "")
            mine, base = _timed(sil, c, args, cached)
            lines.append(f"| {label} | this commit | {_cell(mine)} |")
            if base:
                lines.append(f"| {label} | {args.baseline} | {_cell(base)} |")
    lines += ["", f"load average at end {os.getloadavg()[0]:.1f}", ""]
    # readcache and status are what `sil runs` and `sil status` read a cached view with; runview what reads a run
    for module in (
        "sil.cli.app",
        "sil.cli.app, sil.review.readcache, sil.review.status",
        "sil.cli.app, sil.review.runview, sil.review.status",
    ):
        found = heavy_imports(module)
        lines.append(f"- `import {module}` imports of {', '.join(HEAVY)}: {', '.join(found) or 'none'}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(OUT.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
