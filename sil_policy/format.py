"""Schemas of the seven policy surfaces, their canonical bytes and content hashes.

A policy file is canonical JSON (sorted keys, two-space indent, UTF-8, trailing newline), so
its SHA-256 identifies its content. Every schema forbids unknown keys: a file that does not
validate is rejected with the field path that is wrong.
"""

from __future__ import annotations

import functools
import hashlib
import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from sil_policy.credentials import find_in_data
from sil_policy.files import read_regular

MAX_TEXT = 4000
MAX_NAME = 64
MAX_ITEMS = 64
MAX_DEPTH = 32  # nesting of arrays/objects; the deepest schema needs a handful
MAX_FILE_BYTES = 1 << 20

# Keys that name a measurement or model knob. A mutation whose path mentions one is a
# hyperparameter change, never a policy change (SPEC: rejected at parse and at apply).
HYPERPARAMETER_KEYS = frozenset(
    {
        "model",
        "models",
        "temperature",
        "top_p",
        "top_k",
        "max_tokens",
        "max_turns",
        "turns",
        "seed",
        "seeds",
        "rubric",
        "rubrics",
        "budget",
        "timeout",
        "timeouts",
        "epochs",
        "judge",
        "auditor",
        "reflection_depth",
        "max_retries",
        "retries",
        "cost",
        "usd",
        "limit",
        "limits",
        "hyperparam",
        "hyperparameters",
        "dimensions",
    }
)

# Invisible or direction-changing characters hide text from a human reviewer.
_FORBIDDEN_CHARS = {
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2060",
    "\ufeff",
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u061c",
    "\u200e",
    "\u200f",
}


class PolicyError(ValueError):
    """A policy file or value that does not fit its surface's schema."""


def _check_text(value: str) -> str:
    for ch in value:
        # Cf also covers tag characters (U+E0000 block), invisible text a model still reads.
        if ch in _FORBIDDEN_CHARS or unicodedata.category(ch) in ("Cf", "Co", "Cs", "Cn"):
            raise ValueError(
                f"contains invisible or bidirectional-override character U+{ord(ch):04X}; "
                "remove it so reviewers see exactly what the runtime reads"
            )
        if unicodedata.category(ch) == "Cc" and ch not in "\n\t":
            raise ValueError(f"contains control character U+{ord(ch):04X}")
    return value


def _check_name(value: str) -> str:
    if not value or not all(c.isalnum() or c in "_-" for c in value):
        raise ValueError(f"name {value!r} must be letters, digits, '_' or '-'")
    return value


Text = Annotated[str, Field(max_length=MAX_TEXT), AfterValidator(_check_text)]
Name = Annotated[str, Field(max_length=MAX_NAME), AfterValidator(_check_name)]
Names = Annotated[list[Name], Field(max_length=MAX_ITEMS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class WrapperPrompt(_Strict):
    """Sections joined (in key order) into the runtime's system prompt."""

    sections: Annotated[dict[Name, Text], Field(min_length=1, max_length=MAX_ITEMS)]


class ToolPolicy(_Strict):
    """Which tools the target may see, and in what order they are offered."""

    allowed_tools: Names
    forbidden_tools: Names
    priority_order: Names


class Decomposition(_Strict):
    """Hints that shape how the runtime splits a request into steps."""

    enabled: bool
    prefix: Text
    suffix: Text


class Reflection(_Strict):
    """A self-check the runtime runs on its draft answer before sending it."""

    enabled: bool
    description: Text
    system_prompt: Text


class Skill(_Strict):
    description: Text
    user_invocable: bool


class SkillCatalog(_Strict):
    skills: Annotated[dict[Name, Skill], Field(max_length=MAX_ITEMS)]


class AgentContract(_Strict):
    role: Text
    system_prompt: Text
    tools: Names


class AgentContracts(_Strict):
    agents: Annotated[dict[Name, AgentContract], Field(min_length=1, max_length=MAX_ITEMS)]


class ToolDescription(_Strict):
    description: Text
    hints: Annotated[list[Text], Field(max_length=MAX_ITEMS)]


class ToolDescriptions(_Strict):
    tools: Annotated[dict[Name, ToolDescription], Field(max_length=MAX_ITEMS)]


@dataclass(frozen=True)
class Surface:
    """One mutable policy surface: its name, file and schema."""

    name: str
    filename: str
    schema: type[BaseModel]
    title: str

    @property
    def env_prefix(self) -> str:
        return f"SIL_POLICY_{self.name.upper()}"

    @property
    def override_env(self) -> str:
        return f"{self.env_prefix}_OVERRIDE"

    @property
    def strict_env(self) -> str:
        return f"{self.env_prefix}_STRICT"


SURFACES: dict[str, Surface] = {
    s.name: s
    for s in (
        Surface("wrapper_prompt", "wrapper_prompt.json", WrapperPrompt, "wrapper prompt"),
        Surface("tool_policy", "tool_policy.json", ToolPolicy, "tool policy"),
        Surface("decomposition", "decomposition.json", Decomposition, "decomposition hints"),
        Surface("reflection", "reflection.json", Reflection, "reflection"),
        Surface("skill_catalog", "skill_catalog.json", SkillCatalog, "skill-catalog metadata"),
        Surface("agent_contracts", "agent_contracts.json", AgentContracts, "agent contracts"),
        Surface("tool_descriptions", "tool_descriptions.json", ToolDescriptions, "tool descriptions and hints"),
    )
}


def surface(name: str) -> Surface:
    """Look up a surface by name, with an error that lists the seven valid ones."""
    try:
        return SURFACES[name]
    except KeyError:
        raise PolicyError(f"unknown policy surface {name!r}; the seven surfaces are: {', '.join(SURFACES)}") from None


def canonical_bytes(document: Any) -> bytes:
    """The one byte form a policy document is stored in."""
    return (json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def describe_validation_errors(
    err: ValidationError, root: str = "(document)", hint: Callable[[Any], str | None] | None = None
) -> str:
    """One line per schema error, `  field.path: message`, for messages people act on; `hint`
    may add a fix to an error (e.g. the field a mistyped key meant)."""
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or root
        extra = hint(e) if hint is not None else None
        lines.append(f"  {where}: {e['msg'].removeprefix('Value error, ')}" + (f" ({extra})" if extra else ""))
    return "\n".join(lines)


def _format_validation(name: str, err: ValidationError) -> str:
    return f"{name} policy does not match its schema:\n" + describe_validation_errors(err)


# Files of this size or less have their validated form remembered (at most MEMO_ENTRIES of them):
# a run reads the same few policy files thousands of times, and the secret scan of each read
# dominated a run's CPU. Validation is a pure function of the bytes, so the memo cannot drift.
MEMO_BYTES = 1 << 16
MEMO_ENTRIES = 256


def parse_surface(name: str, data: bytes) -> dict[str, Any]:
    """Validate raw file bytes for a surface; return the document as plain JSON data (a fresh
    copy each call: callers may change it)."""
    if len(data) > MEMO_BYTES:
        return _parse_surface(name, data)
    document: dict[str, Any] = json.loads(_validated_json(name, bytes(data)))
    return document


@functools.lru_cache(maxsize=MEMO_ENTRIES)
def _validated_json(name: str, data: bytes) -> str:
    """The validated document as JSON text; a refusal raises and is not remembered."""
    return json.dumps(_parse_surface(name, data))


def _parse_surface(name: str, data: bytes) -> dict[str, Any]:
    surface(name)
    if len(data) > MAX_FILE_BYTES:
        raise PolicyError(f"{name} policy has {len(data)} bytes; at most {MAX_FILE_BYTES}")
    depth = json_depth(data)
    if depth > MAX_DEPTH:
        raise PolicyError(f"{name} policy nests arrays/objects {depth} deep; at most {MAX_DEPTH}")
    try:
        # utf-8-sig: a byte-order mark some Windows editors write is formatting, not content
        document = json.loads(data.decode("utf-8-sig"), object_pairs_hook=reject_duplicate_keys)
    except UnicodeDecodeError as ex:
        raise PolicyError(f"{name} policy is not UTF-8: {ex}") from None
    except json.JSONDecodeError as ex:
        raise PolicyError(f"{name} policy is not valid JSON: {ex}") from None
    except DuplicateKeyError as ex:
        raise PolicyError(f"{name} policy has a duplicate key {ex.args[0]!r}") from None
    return validate_document(name, document)


def json_depth(data: bytes) -> int:
    """Deepest nesting of '[' and '{' outside strings, counted before any recursive parse."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                return deepest  # enough to refuse; no need to scan on
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def find_secret(document: Any, where: str = "") -> tuple[str, str] | None:
    """(field path, rule name) of the first credential in a document's keys or text, or None."""
    return find_in_data(document, where)


def validate_document(name: str, document: Any) -> dict[str, Any]:
    spec = surface(name)
    try:
        model = spec.schema.model_validate(document)
    except ValidationError as ex:
        raise PolicyError(_format_validation(name, ex)) from None
    data = model.model_dump(mode="json")
    # A policy is stored in the ledger (which cannot be scrubbed without breaking its chain), in
    # candidate commits and in reports: a credential in it is refused here, before any of those.
    if hit := find_secret(data):
        raise PolicyError(
            f"{name} policy field {hit[0]} holds what looks like a secret ({hit[1]}); "
            "remove it (policies are stored, committed and reported in full) and pass credentials by environment"
        )
    return data


def load_surface(name: str, path: Path) -> tuple[dict[str, Any], str]:
    """Read and validate one policy file; return (document, sha256 of its bytes)."""
    try:
        data = read_regular(Path(path), MAX_FILE_BYTES)
    except OSError as ex:
        raise PolicyError(f"cannot read {name} policy at {path}: {ex.strerror}") from None
    return parse_surface(name, data), content_hash(data)


class DuplicateKeyError(ValueError):
    """A JSON object names the same key twice (json.loads would silently keep the last)."""


def reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for json.loads that refuses duplicate keys."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out
