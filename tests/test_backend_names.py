"""No module outside the backends decides anything by a backend's name.

What differs between audit backends is declared by the backend (`sil.exec.measure.AuditBackend`)
and its settings model (sil/contract/backendsettings.py), so a plugin backend is served like a
built-in one. A module outside `sil/exec/backends/` that compares a value with a backend's name
(`backend == "sim"`, `kind in ("sim", "petri")`) or reads a contract section named after one
(`contract.sim`) fails this test; move that decision into the backend.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sil.exec.backends import BACKENDS
from tests.conftest import REPO

BACKENDS_DIR = REPO / "sil" / "exec" / "backends"
NAMES = frozenset(BACKENDS.names())


def _strings(node: ast.expr) -> set[str]:
    """The string constants a comparison operand is or holds (a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for e in node.elts for s in _strings(e)}
    return set()


def name_decisions(source: str, names: frozenset[str] = NAMES) -> list[str]:
    """Each place in `source` that compares with a backend name or reads an attribute named after one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            named = set().union(*(_strings(o) for o in [node.left, *node.comparators])) & names
            if named:
                found.append(f"line {node.lineno}: compares with backend name {sorted(named)}")
        elif isinstance(node, ast.Attribute) and node.attr in names:
            found.append(f"line {node.lineno}: reads .{node.attr}")
    return found


def modules_outside_the_backends() -> list[Path]:
    files = sorted((REPO / "sil").rglob("*.py"))
    return [p for p in files if BACKENDS_DIR not in p.parents]


def test_the_built_in_backends_are_among_the_names_looked_for() -> None:
    assert {"sim", "petri"} <= NAMES


@pytest.mark.parametrize(
    "source",
    [
        'if contract.backend == "petri":\n    pass\n',
        'note = run_note(c) if "sim" != c.backend else None\n',
        'simulated = backend in ("sim", "other")\n',
        "params = contract.sim\n",
    ],
)
def test_the_check_sees_a_decision_by_name(source: str) -> None:
    assert name_decisions(source)


def test_the_check_ignores_names_in_data_and_prose() -> None:
    assert not name_decisions('SECTIONS = {"sim": 1}\nmodel = "sim/judge"\nok = kind in SECTIONS\n')


def test_no_module_outside_the_backends_decides_by_a_backend_name() -> None:
    offenders = {
        str(p.relative_to(REPO)): found
        for p in modules_outside_the_backends()
        if (found := name_decisions(p.read_text(encoding="utf-8")))
    }
    assert offenders == {}, "declare what differs on the backend (sil.exec.measure.AuditBackend) instead"
