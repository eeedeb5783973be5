"""The report's screenshots are the whole page: trimmed to its length, never silently cut off."""

from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from bench.screenshots import MARGIN, trim


def page(path: Path, height: int, content_to: int) -> Path:
    image = Image.new("RGB", (300, height), "white")
    ImageDraw.Draw(image).rectangle((10, 10, 200, content_to), fill="black")
    image.save(path)
    return path


def test_the_empty_bottom_of_the_window_is_cut_to_a_margin_below_the_content(tmp_path):
    shot = page(tmp_path / "report-300px.png", height=2000, content_to=700)
    trim(shot)
    with Image.open(shot) as image:
        assert image.size == (300, 701 + MARGIN)


def test_a_page_longer_than_the_window_is_refused_not_shipped_cut_off(tmp_path):
    shot = page(tmp_path / "report-300px.png", height=800, content_to=799)
    with pytest.raises(SystemExit, match="longer than 800px"):
        trim(shot)
