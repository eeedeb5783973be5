"""Screenshots of `sil report`'s page at the widths a reviewer reads it: what a user sees.

    python -m bench.screenshots [--run RUN] [--out docs/report-screenshots] [--widths 900 1400]

Without --run it makes the default run (`sil run` on program.md, simulated) in a scratch copy of
the project first. It writes the report with the product's own `sil report`, then asks headless
Chromium (Debian's `chromium` package) for one full-page PNG per width, named
`report-<width>px.png`, and a `README.md` beside them saying how and when they were made.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000"]
PAGE_HEIGHT = 16000  # the browser's window; the shot is then trimmed to the page's own length
MARGIN = 24  # pixels of background kept below the page's last content


def browser() -> str:
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    raise SystemExit("no Chromium found: apt-get install chromium")


def sil(*args: str, cwd: Path) -> None:
    command = Path(sys.executable).with_name("sil")  # the venv's own `sil`, as a user runs it
    proc = subprocess.run([str(command), *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"sil {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")


def default_run(scratch: Path) -> tuple[Path, str]:
    """The default run in a scratch copy of the project's contract, measurement and policies."""
    for name in ("program.md",):
        shutil.copy(ROOT / name, scratch / name)
    for folder in ("measurement", "state/policies"):
        shutil.copytree(ROOT / folder, scratch / folder)
    subprocess.run(["git", "init", "-q"], cwd=scratch, check=True)
    sil("run", "--run-id", "default", cwd=scratch)
    return scratch, "default"


def shoot(page: Path, out: Path, width: int) -> Path:
    shot = out / f"report-{width}px.png"
    subprocess.run(
        [browser(), *FLAGS, f"--window-size={width},{PAGE_HEIGHT}", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=180,
        check=True,
    )
    trim(shot)
    return shot


def trim(shot: Path) -> None:
    """Cut the window's empty bottom off; refuse a page longer than the window (a cut-off shot)."""
    from PIL import Image, ImageChops  # matplotlib's dependency: only this bench needs it

    with Image.open(shot) as image:
        page = image.convert("RGB")
    background = Image.new("RGB", page.size, page.getpixel((0, page.height - 1)))
    box = ImageChops.difference(page, background).getbbox()
    bottom = box[3] if box else 0
    if bottom >= page.height - MARGIN:
        raise SystemExit(f"{shot.name}: the page is longer than {page.height}px; raise PAGE_HEIGHT")
    page.crop((0, 0, page.width, bottom + MARGIN)).save(shot)


def commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.screenshots", description=__doc__.split("\n")[0])
    ap.add_argument("--run", help="a finished run of the project in the current folder (default: make one)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "report-screenshots")
    ap.add_argument("--widths", type=int, nargs="+", default=[900, 1400])
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        project, run = (Path.cwd(), args.run) if args.run else default_run(Path(tmp))
        report = Path(tmp) / "report"
        sil("report", run, "--out", str(report), cwd=project)
        shots = [shoot(report / "report.html", args.out, w) for w in args.widths]
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Screenshots of the report",
        "",
        f"- command: `python -m bench.screenshots{' --run ' + args.run if args.run else ''}`",
        f"- date: {when}",
        f"- commit: {commit()}",
        f"- run: {'the default run (simulated)' if not args.run else args.run}; Chromium headless, full page",
        "",
        *[f"![report at {s.stem.split('-')[1]}]({s.name})" for s in shots],
        "",
    ]
    (args.out / "README.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(str(s) for s in shots))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
