"""The field a mistyped key most likely meant, for schema errors people act on."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, unions, Annotated, lists)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is None and not isinstance(annotation, types.UnionType):
        return []
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def fields_at(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The field names of the model that holds the key at `loc` (empty if the path leaves the models)."""
    current = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue  # an index into a list of models: the same model's fields
        field = current.model_fields.get(part)
        models = _models_in(field.annotation) if field is not None else []
        if not models:
            return []
        current = models[0]
    return list(current.model_fields)


def nearest_field(model: type[BaseModel], error: Mapping[str, Any]) -> str | None:
    """For a key the schema forbids, the likeliest intended field as a hint; otherwise None."""
    if error.get("type") != "extra_forbidden" or not error.get("loc"):
        return None
    loc = error["loc"]
    near = difflib.get_close_matches(str(loc[-1]), fields_at(model, loc), n=1)
    return f"did you mean {near[0]!r}?" if near else None
