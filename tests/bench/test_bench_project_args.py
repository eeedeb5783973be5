"""`python -m bench.project` refuses arguments that would measure nothing, before any run."""

from __future__ import annotations

import pytest

from bench import project


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--runs", "0"], "at least 1"),
        (["--revisions", "0"], "at least 1"),
        (["--project-alpha", "1.5"], "between 0 and 1"),
        (["--designs", "none:heldot"], "unknown design(s) none:heldot"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(argv: list[str], says: str, capsys, tmp_path) -> None:
    with pytest.raises(SystemExit) as ex:
        project.parse_args([*argv, "--out", str(tmp_path / "out")])
    assert ex.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_default_designs_are_accepted() -> None:
    assert project.parse_args([]).runs == 300
