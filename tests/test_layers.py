"""The import graph has one direction, read from the folders: a module imports only from its own
folder or from folders earlier in `sil.LAYERS` (function-level imports too), with no cycles.

Layers are folders, not a hand-kept list of modules: a new module belongs to the layer of the
folder it is put in. `bench/` (not installed) may import anything; nothing imports it. The
top-level card files (prepare.py, train.py, ...) are entry points over the package: nothing in
a layer imports them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from sil import LAYERS
from tests.conftest import REPO

CARDS = ("prepare", "train", "measure", "fitness", "gate", "ledger")
TOP = "top"  # bench and the card files: above every layer, imported by none


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@functools.cache  # every edge asks for its module's layer: walk the tree once
def project_modules() -> dict[str, Path]:
    files = [REPO / f"{m}.py" for m in CARDS]
    for d in ("sil", "sil_policy", "sil_runtime", "bench"):
        files += sorted((REPO / d).rglob("*.py"))
    return {module_name(p): p for p in files}


def layer_of(module: str) -> int | str:
    """The index in `sil.LAYERS` of the folder that holds `module` (sub-folders belong to it)."""
    if module in CARDS or module.split(".")[0] == "bench":
        return TOP
    path = project_modules()[module].relative_to(REPO).parent.as_posix()
    for i, folder in enumerate(LAYERS):
        if path == folder or path.startswith(folder + "/"):
            return i
    if path == "sil":
        return -1  # the package's own __init__: no imports, below everything
    raise KeyError(f"{module} is in {path}/, which is not a folder of sil.LAYERS")


def name(layer: int | str) -> str:
    return str(layer) if layer == TOP else ("sil" if layer == -1 else LAYERS[int(layer)])


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
    if src == TOP:
        return True  # bench modules import each other and anything below
    if dst == TOP:
        return False
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


def test_every_source_folder_is_a_layer() -> None:
    missing = []
    for m in project_modules():
        try:
            layer_of(m)
        except KeyError as ex:
            missing.append(str(ex))
    assert not missing, "add these folders to sil.LAYERS (or move the modules):\n" + "\n".join(missing)


def test_every_layer_is_a_folder_with_a_docstring() -> None:
    for folder in LAYERS:
        init = REPO / folder / "__init__.py"
        assert init.is_file(), f"{folder} is in sil.LAYERS but has no __init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} needs a docstring: what the layer is for"


def test_no_import_goes_up_a_layer() -> None:
    upward = [
        f"{src} ({name(layer_of(src))}) imports {dst} ({name(layer_of(dst))})"
        for src, dsts in import_graph().items()
        for dst in sorted(dsts)
        if not allowed(layer_of(src), layer_of(dst))
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


@pytest.mark.parametrize(
    ("src", "dst", "ok"), [(3, 1, True), (1, 3, False), (2, 2, True), (TOP, 5, True), (5, TOP, False)]
)
def test_only_downward_imports_are_allowed(src: int | str, dst: int | str, ok: bool) -> None:
    assert allowed(src, dst) is ok


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


def test_the_readme_layout_lists_the_layers_in_order() -> None:
    text = (REPO / "README.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    listed = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert listed == list(LAYERS), "README.md's layout table must list sil.LAYERS, in order"
