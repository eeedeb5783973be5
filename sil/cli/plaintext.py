"""Text parameters read as typed, without the pydantic validator typer would build for them.

typer (0.2x) coerces each command-line parameter through a pydantic TypeAdapter it builds on
first use, even for a parameter left unset; for a plain `str` parameter (no parser) that
validator returns the text unchanged, and importing pydantic to build it costs `sil status RUN`
about a third of its start-up. `install` makes typer read such a parameter as typed; any other
parameter, or any other value, goes through typer's own coercion as before. On a typer without
these internals it does nothing, and only the speed differs (tests/review/test_glance.py
checks that `sil status` and `sil runs` import no pydantic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def install() -> None:
    """Route plain `str` parameters of every typer command through `PlainText` (once)."""
    try:
        from typer import core
        from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    except ImportError:  # another typer: keep its own coercion
        return
    if getattr(core.build_runtime_param, "plain_text", False):  # type: ignore[attr-defined]
        return

    @dataclass(frozen=True)
    class PlainText(RuntimeParam):
        """A `str` parameter: the text as typed; anything else (bytes) as typer coerces it."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if type(value) is str:
                return value
            return build_runtime_param(TypeDescriptor(str, self.parameter_info, None)).coerce(value, param, ctx)

    def build(descriptor: TypeDescriptor) -> RuntimeParam:
        info = descriptor.parameter_info
        if descriptor.annotation is str and descriptor.file_annotation is None and info.parser is None:
            return PlainText(annotation=str, parameter_info=info)
        return build_runtime_param(descriptor)

    build.plain_text = True  # type: ignore[attr-defined]
    core.build_runtime_param = build  # type: ignore[attr-defined]  # what _TyperParameter calls
