"""The code keeps a readable shape: functions fit on a screen and classes stay small.

Limits: a function (or method) of at most 60 lines, a class of at most 250, docstrings included.
Tests are exempt. A longer one is a sign that it does more than one job: split it.

And no code follows a `return`, `raise`, `break` or `continue` in its block: such code never
runs, and a method pasted there (below a module function that ends in `return`) silently leaves
its class, which then falls back to the base class's default.
"""

from __future__ import annotations

import ast

from tests.test_layers import project_modules

MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 250


def oversized() -> list[str]:
    out = []
    for module, path in project_modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1 if hasattr(node, "lineno") else 0
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and lines > MAX_FUNCTION_LINES:
                out.append(f"function {module}.{node.name}: {lines} lines (at most {MAX_FUNCTION_LINES})")
            elif isinstance(node, ast.ClassDef) and lines > MAX_CLASS_LINES:
                out.append(f"class {module}.{node.name}: {lines} lines (at most {MAX_CLASS_LINES})")
    return out


def test_no_function_or_class_is_oversized() -> None:
    assert not oversized(), "\n".join(oversized())


ENDS_A_BLOCK = (ast.Return, ast.Raise, ast.Break, ast.Continue)


def unreachable() -> list[str]:
    out = []
    for module, path in project_modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(node, field, None)
                if not isinstance(block, list):
                    continue
                for stmt, after in zip(block, block[1:], strict=False):
                    if isinstance(stmt, ENDS_A_BLOCK):
                        out.append(f"{module}:{after.lineno}: never runs (after line {stmt.lineno})")
    return out


def test_no_code_follows_a_return_or_raise() -> None:
    assert not unreachable(), "\n".join(unreachable())
