"""`sil report`'s page in a real headless browser (Chromium from Debian packages): slow suite.

The page must load with no console error and every plot must decode (the page's own load
check writes `data-plots-rendered="n/n"` on <body>); a full-page screenshot is taken. At
1,400 px no table may overflow (the load check counts them in `data-tables-overflowing`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.cli.test_cli import invoke
from tests.review.test_review import RUN, copy_of, done  # noqa: F401 - the shared finished run

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000"]


def _browser() -> str:
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    pytest.skip("no Chromium installed (apt-get install chromium)")


@pytest.mark.slow
def test_report_renders_in_headless_chromium(done, tmp_path, monkeypatch) -> None:  # noqa: F811
    monkeypatch.chdir(done)
    out = tmp_path / "rep"
    assert invoke("report", RUN, "--out", str(out)).exit_code == 0
    url = (out / "report.html").as_uri()
    chrome = _browser()
    proc = subprocess.run(
        [chrome, *FLAGS, "--enable-logging=stderr", "--v=0", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    body = re.search(r"<body[^>]*>", proc.stdout)
    assert body, proc.stderr[-2000:]
    assert 'data-plots-rendered="4/4"' in body.group(0), body.group(0)
    console_errors = [
        line for line in proc.stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "ERROR" in line)
    ]
    assert not console_errors, console_errors
    shot = tmp_path / "shot.png"
    subprocess.run(
        [chrome, *FLAGS, "--window-size=1280,3000", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


WIDTH = 1400


def _dom(chrome: str, url: str) -> str:
    proc = subprocess.run(
        [chrome, *FLAGS, f"--window-size={WIDTH},1000", "--dump-dom", url], capture_output=True, text=True, timeout=120
    )
    assert "<body" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
def test_report_fits_1400px_shows_cost_and_one_champion_status(copy_of, tmp_path) -> None:  # noqa: F811
    """Issue 26: no table overflows at 1,400 px; the cost section has audits, USD, gaps, wall time
    and α; a demoted champion reads the same in the arms table, the KEEP count and the summary."""
    from tests.review.test_review_trust import _demote_a_keep

    arm = _demote_a_keep(copy_of)
    out = tmp_path / "rep"
    assert invoke("report", RUN, "--out", str(out)).exit_code == 0
    dom = _dom(_browser(), (out / "report.html").as_uri())
    body = re.search(r"<body[^>]*>", dom)
    assert body and 'data-tables-overflowing="0"' in body.group(0), body
    assert f'data-page-width="{WIDTH}"' in body.group(0), body.group(0)
    cost = dom[dom.index('id="cost"') : dom.index("<h2>Candidates")]
    for needle in ("audits", "USD", "gaps", "wall time", "error design", "α_certify", "noise floor"):
        assert needle in cost, needle
    arms = dom[dom.index("<h2>Arms") : dom.index('id="cost"')]
    row = re.search(rf"<tr><td>{arm}</td>(.*?)</tr>", arms, re.S)
    assert row and "rolled back to the starting policy" in row.group(1) and "1 demoted" in row.group(1)
    assert "kept, not certified" not in dom, "a section still calls the demoted champion kept"
    data = json.loads((out / "report.json").read_text())
    words = next(a["champion"] for a in data["summary"]["arms"] if a["arm"] == arm)
    assert words in dom.replace("&amp;", "&"), "the HTML and report.json say the same"
