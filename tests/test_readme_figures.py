"""Every figure a README quotes comes from a results file that a bench command wrote.

Figures sit between `<!-- figures: docs/results/NAME.md -->` and `<!-- /figures -->`; every
number with two or more decimals there must occur in that file (or its .json twin). Outside
such blocks, bench/README.md may quote a measured-looking number (signed, like -0.463, or with
three decimals, like 0.047) only if some results file holds it. Code spans are commands and
settings, not figures. Each results file must say how it was made (command, date, commit, runs).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
NUMBER = re.compile(r"(?<![\w.])[-+−±]?(\d+\.\d{2,})(?![\d])")
MEASURED = re.compile(r"(?<![\w.])(?:[-+−±](\d+\.\d{2,})|(\d+\.\d{3,}))(?![\d])")
BLOCK = re.compile(r"<!-- figures: (\S+) -->(.*?)<!-- /figures -->", re.S)
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
HEADER_FIELDS = ("- command:", "- date:", "- commit:", "- runs:")


def numbers(text: str, pattern: re.Pattern[str] = NUMBER) -> set[str]:
    return {g for m in pattern.finditer(CODE.sub(" ", text)) for g in m.groups() if g}


def file_numbers(path: Path) -> set[str]:
    out: set[str] = set()
    for p in (path, path.with_suffix(".json")):
        if p.exists():
            out |= numbers(p.read_text(encoding="utf-8"))
    return out


def unbacked(text: str, outside: bool) -> list[str]:
    """Figures of `text` that no results file holds: per block, and (if `outside`) elsewhere."""
    bad: list[str] = []
    for name, body in BLOCK.findall(text):
        path = ROOT / name
        if not path.exists():
            bad.append(f"{name} (no such results file)")
            continue
        bad += [f"{f} (not in {name})" for f in sorted(numbers(body) - file_numbers(path))]
    if outside:
        everywhere = set().union(*(file_numbers(p) for p in RESULTS.rglob("*.md")))
        rest = BLOCK.sub(" ", text)
        bad += [
            f"{f} (outside a figures block, in no results file)" for f in sorted(numbers(rest, MEASURED) - everywhere)
        ]
    return bad


def test_every_results_file_says_how_it_was_made():
    files = sorted(RESULTS.rglob("*.md"))
    assert files, "docs/results/ holds no results file"
    for path in files:
        head = path.read_text(encoding="utf-8")[:3000]
        absent = [h for h in HEADER_FIELDS if h not in head]
        assert not absent, f"{path.name} lacks {absent}: write it with the bench command's --out"


def test_bench_readme_figures_come_from_results_files():
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    assert BLOCK.search(text), "bench/README.md has no figures block"
    assert not unbacked(text, outside=True), unbacked(text, outside=True)


def test_readme_marked_figures_come_from_results_files():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not unbacked(text, outside=False), unbacked(text, outside=False)


def test_the_check_catches_a_figure_typed_by_hand():
    block = "<!-- figures: docs/results/{} -->\n| x | -0.987654 |\n<!-- /figures -->"
    name = next(RESULTS.glob("*.md")).name
    assert unbacked(block.format(name), outside=False) == [f"0.987654 (not in docs/results/{name})"]
    assert unbacked("final dT -0.987654 in prose", outside=True)
    assert not unbacked("`--set harm_tolerance=0.555` is a setting", outside=True)
