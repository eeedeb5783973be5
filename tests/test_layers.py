"""The import graph has one direction: every import (function-level ones too) goes to the same
layer or a lower one, and there are no cycles.

    L0 foundations   errors, strict loaders, contract, fsutil, faults, the shared policy format
    L1 pure          measurement definition, statistics, gate, mutations, the arm policy
    L2 I/O           ledger and records, audit execution and backends, stores, refs, locks, ...
    L3 orchestration rounds, run context, phases, arms, replication, summary
    L4 train.py      the phase sequencer and composition root
    L5 entry points  CLI, review commands, benchmarks

The runtime under test (`sil_runtime`, layer R) may import only L0, L1 and itself; the loop
(L0-L4) never imports the runtime, except the simulated world's settings schema (L0). A new
module must be given a layer here.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from tests.conftest import REPO

SOURCE_DIRS = ("loop", "sil_policy", "sil_runtime", "bench")
TOP_MODULES = ("prepare", "train", "measure", "fitness", "gate", "ledger")
RUNTIME = "R"
MIXED_PACKAGES = {"loop"}  # a package whose modules sit in different layers
LAYERS: dict[str, int | str] = {
    # L0
    "loop": 0,  # the package itself (empty); its modules are listed one by one
    "loop.errors": 0,
    "loop.yamlstrict": 0,
    "loop.fsutil": 0,
    "loop.faults": 0,
    "loop.runid": 0,
    "loop.diskspace": 0,
    "loop.contract": 0,
    "sil_policy": 0,
    "sil_policy.format": 0,
    "sil_policy.evidence": 0,
    "sil_runtime.sim.params": 0,
    # L1
    "prepare": 1,
    "fitness": 1,
    "gate": 1,
    "loop.mutation": 1,
    "loop.judges": 1,
    # L2
    "ledger": 2,
    "loop.records": 2,
    "measure": 2,
    "loop.backends": 2,
    "loop.policystore": 2,
    "loop.policyrefs": 2,
    "loop.attempts": 2,
    "loop.auditproc": 2,
    "loop.rayexec": 2,
    "loop.approval": 2,
    "loop.checkpoint": 2,
    "loop.sshsig": 2,
    "loop.locks": 2,
    "loop.runstate": 2,
    "loop.journal": 2,
    "loop.proposers": 2,
    "loop.contracts_history": 2,
    "loop.evidence": 2,
    "loop.witness": 2,
    "loop.ledgerverify": 2,
    "loop.modelcalls": 2,
    # L3
    "loop.rounds": 3,
    "loop.context": 3,
    "loop.preflight": 3,
    "loop.arms": 3,
    "loop.baseline": 3,
    "loop.certify": 3,
    "loop.replication": 3,
    "loop.summary": 3,
    "loop.release": 3,
    "loop.review": 3,
    "loop.canary": 3,
    "loop.proposing": 3,
    "loop.startchecks": 3,
    "loop.runview": 3,
    "loop.status": 3,
    "loop.sweep": 3,
    "loop.progress": 3,
    "loop.report": 3,
    "loop.reportplots": 3,
    "loop.reportrender": 3,
    "loop.compare": 3,
    "loop.export": 3,
    # L4
    "train": 4,
    # L5
    "loop.cli": 5,
    "loop.commands": 5,
    "bench": 5,
    "bench.judgepasses": 5,
    # the runtime under test
    "sil_runtime": RUNTIME,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    files = [REPO / f"{m}.py" for m in TOP_MODULES]
    for d in SOURCE_DIRS:
        files += sorted((REPO / d).rglob("*.py"))
    return {module_name(p): p for p in files}


def layer_of(module: str) -> int | str:
    """The layer of `module`, or of its longest listed package (never the mixed `loop` package)."""
    name = module
    while name:
        if name in LAYERS and (name == module or name not in MIXED_PACKAGES):
            return LAYERS[name]
        name = name.rpartition(".")[0]
    raise KeyError(module)


def imported(path: Path, module: str, modules: dict[str, Path]) -> set[str]:
    """Project modules imported anywhere in the file (module level or inside functions)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {r for a in node.names if (r := resolve(a.name))}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for a in node.names:
                if r := resolve(f"{base}.{a.name}") or resolve(base):
                    out.add(r)
    out.discard(module)
    return out


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {m: imported(p, m, modules) for m, p in modules.items()}


def allowed(src: int | str, dst: int | str) -> bool:
    if src == RUNTIME:
        return dst == RUNTIME or (isinstance(dst, int) and dst <= 1)
    if dst == RUNTIME:
        return src == 5  # the benchmarks drive the simulated world directly
    assert isinstance(src, int) and isinstance(dst, int)
    return dst <= src


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_every_module_has_a_layer() -> None:
    missing = []
    for m in project_modules():
        try:
            layer_of(m)
        except KeyError:
            missing.append(m)
    assert not missing, f"give these modules a layer in tests/test_layers.py: {missing}"


def test_no_import_goes_up_a_layer() -> None:
    upward = [
        f"{src} (L{layer_of(src)}) imports {dst} (L{layer_of(dst)})"
        for src, dsts in import_graph().items()
        for dst in sorted(dsts)
        if not allowed(layer_of(src), layer_of(dst))
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_there_is_no_import_cycle() -> None:
    assert find_cycle(import_graph()) is None


@pytest.mark.parametrize(
    ("graph", "expect_cycle"),
    [({"a": {"b"}, "b": {"c"}, "c": set()}, False), ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True)],
)
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]], expect_cycle: bool) -> None:
    assert (find_cycle(graph) is not None) == expect_cycle


def test_function_level_and_relative_imports_are_seen(tmp_path: Path) -> None:
    modules = {"pkg": tmp_path / "pkg" / "__init__.py", "pkg.a": tmp_path / "pkg" / "a.py", "train": tmp_path / "t.py"}
    src = tmp_path / "pkg" / "b.py"
    src.parent.mkdir()
    src.write_text("def f():\n    import train\n    from . import a\n")
    assert imported(src, "pkg.b", modules) == {"train", "pkg.a"}
