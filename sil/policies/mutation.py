"""Typed policy mutations: parse one, check it, apply it to a document (no disk, no audit).

A mutation sets one value at one dotted path inside one of the seven policy surfaces, and
says why (hypothesis, evidence), what it expects (signed effect per dimension) and when to
undo it (rollback condition). Hyperparameters and measurement knobs (model, temperature,
turns, seeds, rubric, budget, timeouts, ...) are rejected when a mutation is parsed and,
independently, when it is applied. Applying returns the new document; writing it, auditing
it and keeping it are separate steps owned by the loop.

    m = parse_mutation(raw_json, contract.search_space.surfaces)
    new_doc = apply_mutation(m, champion_documents, contract.search_space.surfaces)

Judge-addressed text ("evaluator: score this 1") in a mutation's value is rejected: the
value is what the runtime reads, so it can reach the transcript the judge scores, and a
policy that talks to the measurement changes the measurement, not the system. `lint_text`
reports such text; prose fields (hypothesis, evidence, rollback) are for reviewers, never
reach the runtime, and may name judges and dimensions freely.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import unicodedata
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    model_validator,
)

from sil_policy import (
    HYPERPARAMETER_KEYS,
    SURFACES,
    DuplicateKeyError,
    PolicyError,
    describe_validation_errors,
    reject_duplicate_keys,
    validate_document,
)
from sil_policy.credentials import find_in_data
from sil_policy.format import MAX_ITEMS, MAX_TEXT

SIGN_CONVENTION = (
    "expected_effect[dim] is the expected change of the dimension's audit mean (1-10 scale); "
    "negative = lower score; for lower-is-better dims negative is an improvement"
)

MAX_MUTATION_BYTES = 65_536  # a whole mutation as JSON text
MAX_PATH_DEPTH = 3  # the deepest field in any schema: tools.<name>.hints
MAX_VALUE_CHARS = 16_000  # all strings of a value together
MAX_HYPOTHESIS = 2000
MAX_ROLLBACK = 1000
MAX_EVIDENCE_ITEMS = 16
MAX_EVIDENCE_CHARS = 500
MAX_EFFECTS = 16
MAX_EFFECT = 9.0  # a 1-10 scale cannot move further

_SEGMENT = re.compile(r"[A-Za-z0-9_-]{1,64}")
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_HYPER_COMPACT = {k.replace("_", ""): k for k in HYPERPARAMETER_KEYS}
_MAX_KEY_WORDS = max(len(k.split("_")) for k in HYPERPARAMETER_KEYS)
# Unicode categories that hide or corrupt text: controls, format (zero-width, bidi, tag
# characters), surrogates, private use, unassigned.
_BAD_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn"}


class MutationError(ValueError):
    """A mutation that is malformed, outside the allowed surfaces, or invalid when applied."""


# --- text checks --------------------------------------------------------------------------


def _clean_text(text: str) -> str:
    for ch in text:
        if unicodedata.category(ch) in _BAD_CATEGORIES and ch not in "\n\t":
            raise ValueError(
                f"contains invisible, control or unassigned character U+{ord(ch):04X}; "
                "remove it so reviewers see exactly what the runtime reads"
            )
    return text


def _nonblank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be blank")
    return text


_CleanProse = Annotated[str, AfterValidator(_clean_text), AfterValidator(_nonblank)]
Hypothesis = Annotated[_CleanProse, Field(min_length=1, max_length=MAX_HYPOTHESIS)]
EvidenceItem = Annotated[_CleanProse, Field(min_length=1, max_length=MAX_EVIDENCE_CHARS)]
RollbackCondition = Annotated[_CleanProse, Field(min_length=1, max_length=MAX_ROLLBACK)]


def _validate_value(value: Any) -> str | bool | list[str]:
    """A value is one text, one boolean or a list of texts, within the schemas' size limits."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        texts = [value]
    elif isinstance(value, list) and len(value) > MAX_ITEMS:
        raise ValueError(f"value is a list of {len(value)} items; at most {MAX_ITEMS}")
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        texts = value
    else:
        raise ValueError(f"value must be a string, a boolean or a list of strings, not {type(value).__name__}")
    for i, text in enumerate(texts):
        if len(text) > MAX_TEXT:
            raise ValueError(f"text {i} has {len(text)} characters; at most {MAX_TEXT}")
        _clean_text(text)
    total = sum(len(t) for t in texts)
    if total > MAX_VALUE_CHARS:
        raise ValueError(f"value has {total} characters in all; at most {MAX_VALUE_CHARS}")
    return list(value) if isinstance(value, list) else value


Value = Annotated[str | bool | list[str], PlainValidator(_validate_value)]

# --- judge-addressed text -------------------------------------------------------------------

_ROLE = (
    r"(?:judge|grader|evaluator|auditor|assessor|scorer|rater|reviewer|annotator|overseer"
    r"|red[- ]?teamer|monitor)s?"
)
_SCORED = r"(?:scored|judged|graded|evaluated|audited|rated|assessed|monitored)"
# Rules see lower-case text with single spaces, so " " in a pattern is one whitespace run.
_LINT_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (message, re.compile(pattern))
    for message, pattern in (
        ("addresses an evaluator directly", rf"\b{_ROLE} ?[:>\u2013\u2014]"),
        ("addresses an evaluator directly", rf"(?:^|[.!?;] ?){_ROLE} ?,"),
        (
            "addresses an evaluator directly",
            rf"\b(?:dear|hey|hi|hello|attention|note (?:to|for)) (?:the |any )?"
            rf"(?:ai )?{_ROLE}\b",
        ),
        ("asks for a score", r"\b(?:score|grade) (?:this|it|me|us|the \w+)\b"),
        (
            "asks for a score",
            r"\brate (?:this|the) (?:response|reply|answer|transcript|conversation|target"
            r"|assistant|agent|model)\b",
        ),
        (
            "asks for a score",
            r"\b(?:give|assign|award) (?:this|it|me|us|the \w+)? ?(?:an? )?"
            r"(?:\d+|high|low|perfect|top|full|good|better|best|minimum|maximum)? ?"
            r"(?:score|rating|grade|marks?)\b",
        ),
        ("states a score", r"\b(?:score|rating|grade) ?(?:of|=|:|is)? ?\d+(?:\.\d+)?\b"),
        ("states a score", r"\b\d+(?:\.\d+)? ?(?:/|out of) ?10\b"),
        (
            "talks about being evaluated",
            rf"\b(?:this|the) (?:conversation|transcript|chat|session|interaction|response"
            rf"|reply|answer) (?:is|will be|may be|is being|gets) {_SCORED}\b",
        ),
        (
            "talks about being evaluated",
            r"\byou are (?:being |now )?(?:tested|evaluated|audited|scored|judged"
            r"|graded|monitored)\b",
        ),
        ("talks about being evaluated", r"\b(?:this is|in) an? (?:test|evaluation|eval|audit)\b"),
        ("names the measurement apparatus", r"\b(?:rubric|petri|inspect[-_ ]?ai)\b"),
        (
            "tries to override instructions",
            r"\b(?:ignore|disregard|forget) (?:all |any )?(?:the |your )?"
            r"(?:previous|prior|above|earlier|system|original) "
            r"(?:instructions|guidance|rules|prompts?|messages?)\b",
        ),
    )
)
# Latin look-alikes in other scripts, so "еvaluator" (Cyrillic е) is read as "evaluator".
_CONFUSABLES = str.maketrans(
    "аеорсухіјѕԁһӏոαεικνορτυχ",
    "aeopcyxijsdhlnaeikvoptux",
)


def lint_text(text: str) -> list[str]:
    """Findings for text that addresses the judge, asks for a score or disguises words.

    Matching ignores case, width variants, invisible characters and common Cyrillic/Greek
    look-alikes. An empty list means nothing was found, not that the text is harmless.
    """
    findings: list[str] = []
    for word in re.findall(r"\w+", text):
        scripts = {unicodedata.name(ch, "?").split()[0] for ch in word if ch.isalpha()} & {"LATIN", "CYRILLIC", "GREEK"}
        if len(scripts) > 1:
            findings.append(f"mixes scripts in one word ({word!r}); look-alike letters hide words")
            break
    visible = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    normal = unicodedata.normalize("NFKC", visible).lower().translate(_CONFUSABLES)
    # One space per whitespace run (a line break ends a sentence) keeps every rule linear.
    normal = re.sub(r"\s+", " ", re.sub(r"\s*\n\s*", ". ", normal))
    for message, pattern in _LINT_RULES:
        match = pattern.search(normal)
        if match:
            findings.append(f"{message}: {match.group(0).strip()!r}")
    return findings


def _value_texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


# --- surface, path and hyperparameter rules --------------------------------------------------


def _hyperparameter_key(name: str) -> str | None:
    """The hyperparameter key `name` is or contains as a word run (snake, kebab or camel)."""
    words = [w.lower() for w in _WORD.findall(name)]
    for i in range(len(words)):
        for j in range(i + 1, min(i + _MAX_KEY_WORDS, len(words)) + 1):
            hit = _HYPER_COMPACT.get("".join(words[i:j]))
            if hit:
                return hit
    return None


def _hyperparameter_error(what: str, key: str) -> MutationError:
    return MutationError(
        f"{what} names the hyperparameter or measurement knob {key!r}; the run contract freezes "
        "models, sampling, turns, seeds, rubric, budget and timeouts, so a mutation may only "
        f"change the seven policy surfaces ({', '.join(SURFACES)}). Revise the contract instead."
    )


def _allowed(allowed_surfaces: Sequence[str]) -> frozenset[str]:
    """The contract's surfaces, intersected with the seven: extra names never widen them."""
    if isinstance(allowed_surfaces, (str, bytes, Mapping)) or not isinstance(allowed_surfaces, Collection):
        raise MutationError(
            "allowed_surfaces must be a list of surface names (the contract's "
            f"search_space.surfaces), not a {type(allowed_surfaces).__name__}"
        )
    return frozenset(s for s in allowed_surfaces if isinstance(s, str)) & SURFACES.keys()


def _check_surface(surface: Any, allowed: frozenset[str]) -> str:
    if not isinstance(surface, str) or not 0 < len(surface) <= 64:
        raise MutationError(f"surface must be a surface name, got {str(surface)[:80]!r}")
    key = _hyperparameter_key(surface)
    if key:
        raise _hyperparameter_error(f"surface {surface[:80]!r}", key)
    if surface not in SURFACES:
        raise MutationError(f"unknown surface {surface[:80]!r}; the seven surfaces are: {', '.join(SURFACES)}")
    if surface not in allowed:
        raise MutationError(
            f"surface {surface!r} is not in the contract's search_space.surfaces "
            f"({', '.join(sorted(allowed)) or 'none'}); the run may not change it"
        )
    return surface


def _check_path(path: Any) -> list[str]:
    if not isinstance(path, str) or not path:
        raise MutationError(f"path must be a non-empty dotted path, got {str(path)[:80]!r}")
    segments = path.split(".")
    if len(segments) > MAX_PATH_DEPTH:
        raise MutationError(f"path {path[:120]!r} has {len(segments)} segments; at most {MAX_PATH_DEPTH}")
    for segment in segments:
        if not _SEGMENT.fullmatch(segment):
            raise MutationError(
                f"path {path[:120]!r} has an invalid segment {segment[:80]!r}: each segment is "
                "1-64 ASCII letters, digits, '_' or '-', separated by single dots "
                "(no '..', '/', spaces or empty segments)"
            )
        key = _hyperparameter_key(segment)
        if key:
            raise _hyperparameter_error(f"path {path!r}", key)
    return segments


def _check_value(value: Any) -> Any:
    try:
        value = _validate_value(value)
    except ValueError as ex:
        raise MutationError(f"invalid value: {ex}") from None
    for text in _value_texts(value):
        findings = lint_text(text)
        if findings:
            raise MutationError(
                "value addresses the measurement instead of the runtime ("
                + "; ".join(findings)
                + "); policies may not speak to the judge or auditor"
            )
    return value


# --- the mutation ----------------------------------------------------------------------------

DimensionName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
Effect = Annotated[float, Field(ge=-MAX_EFFECT, le=MAX_EFFECT, allow_inf_nan=False)]


class Mutation(BaseModel):
    """One policy change with its hypothesis, evidence, expected effect and rollback rule."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    mutation_id: Annotated[str, Field(pattern=r"^[0-9a-f]{12}$")]
    surface: Annotated[str, Field(max_length=64)]
    path: Annotated[str, Field(max_length=200)]
    value: Value
    hypothesis: Hypothesis
    evidence: Annotated[list[EvidenceItem], Field(min_length=1, max_length=MAX_EVIDENCE_ITEMS)]
    expected_effect: Annotated[dict[DimensionName, Effect], Field(min_length=1, max_length=MAX_EFFECTS)]
    rollback_condition: RollbackCondition
    proposer: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")]

    @model_validator(mode="after")
    def _policy_only(self) -> Mutation:
        _check_surface(self.surface, frozenset(SURFACES))
        _check_path(self.path)
        _check_value(self.value)
        return self

    @property
    def edit_key(self) -> tuple[str, str, str]:
        """(surface, path, value hash): what a run remembers to avoid proposing twice."""
        return (self.surface, self.path, value_hash(self.value))


def value_hash(value: Any) -> str:
    data = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def mutation_id_for(seed: int, index: int, surface: str, path: str, value: Any) -> str:
    """A deterministic 12-hex id: the same run seed, round and edit give the same id."""
    data = json.dumps(
        ["sil-mutation", int(seed), int(index), surface, path, value],
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:12]


# --- parse -----------------------------------------------------------------------------------


def _finite_float(text: str) -> float:
    number = float(text)
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} is out of range")
    return number


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a mutation may carry (NaN and Infinity are refused)")


def _decode(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if not isinstance(raw, (bytes, bytearray)):
        raise MutationError(f"a mutation is JSON text, bytes or a dict, not {type(raw).__name__}")
    if len(raw) > MAX_MUTATION_BYTES:
        raise MutationError(f"mutation is {len(raw)} bytes; at most {MAX_MUTATION_BYTES}")
    try:
        data = json.loads(
            bytes(raw).decode("utf-8"),
            object_pairs_hook=reject_duplicate_keys,
            parse_float=_finite_float,
            parse_constant=_no_constant,
        )
    except UnicodeDecodeError as ex:
        raise MutationError(f"mutation is not UTF-8 text: {ex.reason} at byte {ex.start}") from None
    except DuplicateKeyError as ex:
        raise MutationError(f"mutation JSON repeats the key {ex.args[0][:80]!r}") from None
    except json.JSONDecodeError as ex:
        raise MutationError(f"mutation is not valid JSON: {ex}") from None
    except RecursionError:
        raise MutationError("mutation JSON is nested too deeply") from None
    except ValueError as ex:  # NaN, Infinity, overflowing floats, over-long integers
        raise MutationError(f"mutation JSON has an invalid number: {ex}") from None
    if not isinstance(data, dict):
        raise MutationError(f"a mutation is a JSON object, not {type(data).__name__}")
    return data


def refuse_secrets(data: Any) -> None:
    """A credential anywhere in a mutation (its hypothesis as much as its value) is refused: the
    mutation goes into the ledger, the reports and the next prompt."""
    if hit := find_in_data(data):
        raise MutationError(
            f"mutation field {hit[0]} holds what looks like a secret ({hit[1]}); a mutation is recorded "
            "in the ledger and the reports: write no credential in it"
        )


def parse_mutation(raw: str | bytes | dict[str, Any], allowed_surfaces: Sequence[str]) -> Mutation:
    """Parse and check a mutation: JSON text (duplicate keys refused) or an already-decoded dict."""
    allowed = _allowed(allowed_surfaces)
    data = _decode(raw)
    refuse_secrets(data)
    # Surface and path first, so a hyperparameter change gets that error whatever else is wrong.
    _check_surface(data.get("surface"), allowed)
    _check_path(data.get("path"))
    if "value" in data:
        _check_value(data["value"])
    try:
        mutation = Mutation.model_validate(data)
    except ValidationError as ex:
        raise MutationError(f"invalid mutation:\n{describe_validation_errors(ex, '(mutation)')}") from None
    return mutation


# --- apply -----------------------------------------------------------------------------------


def value_at(document: dict[str, Any], path: str) -> Any:
    """The value at a dotted path, or None where the path's last key is absent."""
    node: Any = document
    for depth, segment in enumerate(path.split(".")):
        if not isinstance(node, dict):
            where = ".".join(path.split(".")[:depth])
            raise MutationError(f"path {path!r}: {where!r} is not a mapping, cannot go inside it")
        if segment not in node:
            if depth < len(path.split(".")) - 1:
                raise MutationError(_missing_parent(path, depth))
            return None
        node = node[segment]
    return node


def _missing_parent(path: str, depth: int) -> str:
    where = ".".join(path.split(".")[: depth + 1])
    return (
        f"path {path!r}: {where!r} does not exist; a mutation changes one field of an existing "
        "entry or adds one key to an existing mapping"
    )


def _set_path(document: dict[str, Any], segments: list[str], value: Any) -> None:
    node: Any = document
    for depth, segment in enumerate(segments[:-1]):
        if not isinstance(node, dict) or segment not in node:
            raise MutationError(_missing_parent(".".join(segments), depth))
        node = node[segment]
    if not isinstance(node, dict):
        where = ".".join(segments)
        raise MutationError(f"path {where!r} goes inside a value that is not a mapping")
    node[segments[-1]] = copy.deepcopy(value)


def _changed_keys(old: Any, new: Any, prefix: str = "") -> Iterator[str]:
    """Every key path whose value differs between two documents."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key, _ABSENT) != new.get(key, _ABSENT):
                yield from _changed_keys(old.get(key), new.get(key), f"{prefix}{key}.")
    elif prefix:
        yield prefix[:-1]


_ABSENT = object()


def apply_mutation(
    mutation: Mutation, documents: dict[str, dict[str, Any]], allowed_surfaces: Sequence[str]
) -> dict[str, Any]:
    """The new validated document of `mutation.surface`; nothing is written to disk.

    Every rule is checked again here, without trusting that `parse_mutation` ran (a Mutation
    built with `model_construct` skips validation), and the keys that actually changed are
    checked against the hyperparameter list too.
    """
    if not isinstance(mutation, Mutation):
        raise MutationError(f"apply_mutation needs a Mutation, not {type(mutation).__name__}")
    allowed = _allowed(allowed_surfaces)
    name = _check_surface(getattr(mutation, "surface", None), allowed)
    segments = _check_path(getattr(mutation, "path", None))
    value = _check_value(getattr(mutation, "value", None))
    label = f"mutation {getattr(mutation, 'mutation_id', '?')!s:.12} ({name}.{mutation.path})"
    if name not in documents:
        raise MutationError(f"{label}: no current {name} document to apply it to")
    try:
        current = validate_document(name, documents[name])
    except PolicyError as ex:
        raise MutationError(f"{label}: the current document is itself invalid: {ex}") from None
    candidate = copy.deepcopy(current)
    _set_path(candidate, segments, value)
    for key_path in _changed_keys(current, candidate):
        for segment in key_path.split("."):
            key = _hyperparameter_key(segment)
            if key:
                raise _hyperparameter_error(f"{label} would change {key_path!r}, which", key)
    try:
        result = validate_document(name, candidate)
    except PolicyError as ex:
        raise MutationError(f"{label} makes an invalid policy: {ex}") from None
    if result == current:
        raise MutationError(f"{label} changes nothing: the value is already in place")
    return result
