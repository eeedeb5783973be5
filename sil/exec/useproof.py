"""Per-audit proof of use: the text that sets an audit's policy apart must reach the target model.

The wiring preflight proves once, with sentinels, that each searched surface reaches the runtime.
A runtime could be honest only while a sentinel is present and run its built-in defaults otherwise,
still reporting the hashes it was sent. So every audit of a pair (candidate and champion, or
champion and origin) is checked as well, without touching the policy under test: on each surface
where its set differs from the other arm's, the text this set has and the other lacks (its
*distinctive strings*) must show in the target model's inputs, and long text only the other set
has (text a mutation removed) must not. Both sides are compared without their whitespace, so a
runtime that re-wraps (at hyphens too), re-indents or joins sections passes; strings shorter
than `MIN_DISTINCT` characters are too common to prove anything and are not checked.

Fields are of two kinds. *Required* fields reach the target in every audit of a runtime that
uses the surface: wrapper sections, skill descriptions and agent roles (the prompt-visible
surfaces whose sentinels the preflight finds). A distinctive required string missing from the
inputs of any sample (seed) in which the target was called refutes use. *Conditional* fields
reach it only on some paths (an agent's own instructions when that agent runs, planning and
reflection prompts when enabled, a tool's description when the tool is shown): found, they
prove use; missing, they prove nothing. A refuted audit is a gap (sil/exec/measure.py), so no
score and no verdict rests on it.

    expected = expectations(load_docs(policy_dir), load_docs(other_dir))   # per differing surface
    report = check(expected, inputs_by_sample)   # per-surface use, and why use is refuted (or None)
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sil.integrity.records import AuditUse
from sil_policy import SURFACES, parse_surface

# lengths count the characters compared (whitespace left out)
MIN_DISTINCT = 12  # shorter text ("Be brief.") could show in any prompt
MIN_REMOVED = 24  # absence is checked only for text long enough never to show by chance
QUOTE = 80
# Text fields of each surface, as paths into its document ("*" = every key), and whether the
# field reaches the target in every audit that uses the surface (required) or only on some paths.
FIELDS: dict[str, tuple[tuple[tuple[str, ...], bool], ...]] = {
    "wrapper_prompt": ((("sections", "*"), True),),
    "skill_catalog": ((("skills", "*", "description"), True),),
    "agent_contracts": ((("agents", "*", "role"), True), (("agents", "*", "system_prompt"), False)),
    "decomposition": ((("prefix",), False), (("suffix",), False)),
    "reflection": ((("description",), False), (("system_prompt",), False)),
    "tool_descriptions": ((("tools", "*", "description"), False), (("tools", "*", "hints", "*"), False)),
    "tool_policy": (),  # tool names only: their use shows as tools offered, not as text
}
# Surfaces with a required field: their sentinel text shows in the target's inputs (the preflight).
PROMPT_VISIBLE = tuple(s for s, fields in FIELDS.items() if any(required for _, required in fields))
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Expected:
    """What the target's inputs must and must not show for one surface where the arms differ."""

    surface: str
    required: tuple[str, ...]  # all must show
    conditional: tuple[str, ...]  # any that shows proves use
    removed: tuple[str, ...]  # none may show

    @property
    def checkable(self) -> bool:
        return bool(self.required or self.conditional or self.removed)


@dataclass(frozen=True)
class UseReport:
    """Per differing surface, whether the audit shows its use; `refuted` says why it does not."""

    use: dict[str, AuditUse]
    refuted: str | None = None


def normalise(text: str) -> str:
    """Text as compared: NFC, whitespace left out (templates re-wrap, re-indent and join text)."""
    return _SPACE.sub("", unicodedata.normalize("NFC", text))


def _shown(text: str) -> str:
    """Text as quoted in a reason: one line, at most QUOTE characters."""
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= QUOTE else text[: QUOTE - 1] + "…"


def load_docs(policy_dir: Path) -> dict[str, dict[str, Any]]:
    """The seven documents of a stored policy set."""
    return {name: parse_surface(name, (policy_dir / spec.filename).read_bytes()) for name, spec in SURFACES.items()}


def text_fields(surface: str, doc: dict[str, Any]) -> list[tuple[str, bool]]:
    """Every text field of one document, with whether it is required."""
    out: list[tuple[str, bool]] = []
    for path, required in FIELDS[surface]:
        out += [(value, required) for value in _walk(doc, path)]
    return out


def _walk(node: Any, path: tuple[str, ...]) -> list[str]:
    if not path:
        return [node] if isinstance(node, str) else []
    head, rest = path[0], path[1:]
    if head == "*":
        children = list(node.values()) if isinstance(node, dict) else list(node) if isinstance(node, list) else []
    else:
        children = [node[head]] if isinstance(node, dict) and head in node else []
    return [leaf for child in children for leaf in _walk(child, rest)]


def all_text(docs: dict[str, dict[str, Any]]) -> list[str]:
    """Every text field of a policy set, normalised."""
    return [key for name, doc in docs.items() for text, _ in text_fields(name, doc) if (key := normalise(text))]


def expectations(own: dict[str, dict[str, Any]], other: dict[str, dict[str, Any]]) -> list[Expected]:
    """For each surface where `own` differs from `other`: the text to find, and the text not to find.

    Distinctive: own text that is no part of any text of the other set (a runtime showing the
    other set, or defaults equal to it, cannot show it). Removed: the other set's text that own
    text neither holds nor makes up, even joined by a template (what is left after cutting every
    own text out of it is still long).
    """
    theirs, mine = all_text(other), all_text(own)
    out = []
    for name in SURFACES:
        if own[name] == other[name]:
            continue
        fields = text_fields(name, own[name])
        distinct = [(t, req) for t, req in fields if _distinct(normalise(t), theirs)]
        removed = [t for t, _ in text_fields(name, other[name]) if _removed(normalise(t), mine)]
        out.append(
            Expected(
                surface=name,
                required=tuple(dict.fromkeys(t for t, req in distinct if req)),
                conditional=tuple(dict.fromkeys(t for t, req in distinct if not req)),
                removed=tuple(dict.fromkeys(removed)),
            )
        )
    return out


def _distinct(text: str, theirs: list[str]) -> bool:
    """Whether own `text` is long enough to prove anything and no part of the other set's text."""
    return len(text) >= MIN_DISTINCT and not any(text in t for t in theirs)


def _removed(text: str, mine: list[str]) -> bool:
    """Whether the other set's `text` is gone from own text: in none of it, and not made up of it."""
    if any(text in t for t in mine):
        return False
    for piece in sorted(mine, key=len, reverse=True):
        text = text.replace(piece, " ")
    return len(text.replace(" ", "")) >= MIN_REMOVED


def check(expected: list[Expected], inputs: dict[str, str] | str | None) -> UseReport:
    """Each differing surface's use as the target's inputs show it, per sample (a runtime honest
    in one sample of an audit does not pass it); a plain string is one audit's inputs as a whole.
    None: the backend cannot show them. A sample whose target was given nothing shows nothing."""
    if inputs is None:
        return UseReport(use={e.surface: "not_provable" for e in expected})
    whole = {"the audit": inputs} if isinstance(inputs, str) else inputs
    seen = {k: text for k, v in whole.items() if (text := normalise(v))} or {"the audit": ""}
    use: dict[str, AuditUse] = {}
    problems = []
    for e in expected:
        missing = {t: [k for k, v in seen.items() if normalise(t) not in v] for t in e.required}
        still = {t: [k for k, v in seen.items() if normalise(t) in v] for t in e.removed}
        missing, still = {t: k for t, k in missing.items() if k}, {t: k for t, k in still.items() if k}
        if missing or still:
            use[e.surface] = "refuted"
            problems += [
                f"{e.surface}: text this set has is not in them{_where(k, seen)}: «{_shown(t)}»"
                for t, k in missing.items()
            ]
            problems += [
                f"{e.surface}: text this set removed is still in them{_where(k, seen)}: «{_shown(t)}»"
                for t, k in still.items()
            ]
        elif e.required or any(normalise(t) in v for t in e.conditional for v in seen.values()):
            use[e.surface] = "proven"
        else:
            use[e.surface] = "not_provable"
    if not problems:
        return UseReport(use=use)
    empty = " (the target model was given no input at all)" if not any(seen.values()) else ""
    why = (
        "the runtime reported the sent policy hashes, but the target model's inputs show another policy"
        f"{empty}: {'; '.join(problems)}. The runtime does not use the policy it reports (or its "
        "prompts rewrite the policy's text beyond whitespace)"
    )
    return UseReport(use=use, refuted=why)


def _where(samples: list[str], seen: dict[str, str]) -> str:
    """Which samples a finding holds for, when not for all of them."""
    return "" if len(samples) == len(seen) else f" (in {len(samples)} of {len(seen)} samples: {', '.join(samples)})"
