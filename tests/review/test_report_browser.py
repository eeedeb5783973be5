"""`sil report`'s page in a real headless browser (Chromium from Debian packages): slow suite.

The page must load with no console error and every plot must decode (the page's own load
check writes `data-plots-rendered="n/n"` on <body>); a full-page screenshot is taken.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.cli.test_cli import invoke
from tests.review.test_review import RUN, done  # noqa: F401 - the shared finished run

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
