"""Per-audit proof of use: the text that sets an audit's policy apart must reach the target model.

The wiring preflight proves once, with sentinels, that each searched surface reaches the runtime.
A runtime could be honest only while a sentinel is present and run its built-in defaults otherwise,
still reporting the hashes it was sent. So every audit of a pair (candidate and champion, or
champion and origin), and a screen's lone audit of the candidate against the champion it is
compared with, is checked as well, without touching the policy under test: on each surface
where its set differs from the other arm's, the text this set has and the other lacks (its
*distinctive strings*) must show in the target model's inputs, and long text only the other set
has (text a mutation removed) must not. Both sides are compared without their whitespace, so a
runtime that re-wraps (at hyphens too), re-indents or joins sections passes; strings shorter
than `MIN_DISTINCT` characters are too common to prove anything and are not checked.

Fields are of two kinds. *Required* fields reach the target in every audit of a runtime that
uses the surface: wrapper sections, skill descriptions and agent roles (the prompt-visible
surfaces whose sentinels the preflight finds). A distinctive required string missing from the
inputs of any sample (seed) refutes use. *Conditional* fields reach it only on some paths (an
agent's own instructions when that agent runs, planning and reflection prompts when enabled):
found, they prove use; missing, they prove nothing. A refuted audit is a gap
(sil/exec/measure.py), so no score and no verdict rests on it.

Where the backend shows the tools offered in each target call (`SampleView`; Petri's log does),
the tool surfaces are checked per call too. A tool's distinctive description and hint text must
be in its offered description in every call that offers the tool, and long text removed from it
must be in none. A tool this set's `tool_policy` does not permit and the other's does
(*withheld*) must never be offered. A tool it permits and the other does not (*granted*) must be
offered in some call of every sample where the seed gives the agent a chance (`_chance`).

A sample in which the target model took no part (no call of it, no input) proves nothing and
its scores cannot count: it refutes the audit, named.

    expected = expectations(load_docs(policy_dir), load_docs(other_dir))   # per differing surface
    report = check(expected, views_by_sample)   # per-surface use, and why use is refuted (or None)
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
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
    "tool_policy": (),  # tool names only: their use shows as the tools offered (`SampleView`), not as text
}
# Surfaces with a required field: their sentinel text shows in the target's inputs (the preflight).
PROMPT_VISIBLE = tuple(s for s, fields in FIELDS.items() if any(required for _, required in fields))
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class TargetCall:
    """One call of the target model: each tool it was offered, name -> description as offered."""

    tools: Mapping[str, str]


@dataclass(frozen=True)
class SampleView:
    """What the target model was given in one sample (seed): all its input text, and where the
    backend can show them, the tools of each of its calls (`calls` None: it cannot) and the tools
    the host offered the runtime for the whole sample (`host_tools` None: unknown)."""

    text: str
    calls: tuple[TargetCall, ...] | None = None
    host_tools: frozenset[str] | None = None


# Per sample, a view or its input text; a plain string is one audit's inputs as a whole;
# None: the backend cannot show them.
Inputs = Mapping[str, str | SampleView] | str | None
ToolText = tuple[tuple[str, str], ...]  # (tool, text)


@dataclass(frozen=True)
class Expected:
    """What the target's inputs must and must not show for one surface where the arms differ."""

    surface: str
    required: tuple[str, ...]  # all must show
    conditional: tuple[str, ...]  # any that shows proves use
    removed: tuple[str, ...]  # none may show
    tool_text: ToolText = ()  # in the tool's offered description in every call that offers it
    tool_removed: ToolText = ()  # in the tool's offered description in no call
    granted: tuple[str, ...] = ()  # tools this set permits and the other does not
    withheld: tuple[str, ...] = ()  # tools the other set permits and this one does not
    agents: tuple[frozenset[str], ...] = ()  # this set's agents' tool allow-lists

    @property
    def checkable(self) -> bool:
        tools = self.tool_text or self.tool_removed or self.granted or self.withheld
        return bool(self.required or self.conditional or self.removed or tools)


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
    own text out of it is still long). The tool surfaces add the same per tool, and the tools
    one set's policy permits and the other's does not.
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
                **_tool_expectations(name, own, other, theirs, mine),
            )
        )
    return out


def _tool_expectations(
    surface: str, own: dict[str, dict[str, Any]], other: dict[str, dict[str, Any]], theirs: list[str], mine: list[str]
) -> dict[str, Any]:
    """The per-tool part of a differing tool surface's expectations (none for other surfaces)."""
    if surface == "tool_descriptions":
        return {
            "tool_text": tuple((t, x) for t, x in _tool_texts(own[surface]) if _distinct(normalise(x), theirs)),
            "tool_removed": tuple((t, x) for t, x in _tool_texts(other[surface]) if _removed(normalise(x), mine)),
        }
    if surface == "tool_policy":
        mine_ok, theirs_ok = permitted(own[surface]), permitted(other[surface])
        return {
            "granted": tuple(t for t in mine_ok if t not in theirs_ok),
            "withheld": tuple(t for t in theirs_ok if t not in mine_ok),
            "agents": tuple(frozenset(a["tools"]) for a in own["agent_contracts"]["agents"].values()),
        }
    return {}


def _tool_texts(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(tool, text) for each tool's description and each of its hints."""
    return [(tool, text) for tool, entry in doc["tools"].items() for text in (entry["description"], *entry["hints"])]


def permitted(tool_policy: dict[str, Any]) -> list[str]:
    """The tools a tool policy lets the target see: allowed and not forbidden."""
    forbidden = set(tool_policy["forbidden_tools"])
    return [t for t in dict.fromkeys(tool_policy["allowed_tools"]) if t not in forbidden]


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


def check(expected: list[Expected], inputs: Inputs) -> UseReport:
    """Each differing surface's use as the target's inputs show it, per sample (a runtime honest
    in one sample of an audit does not pass it) and, where the views show tools, per call.
    A sample in which the target model took no part refutes the audit (its replies are not the
    model's, so its scores cannot count); a plain string is one audit's inputs as a whole."""
    if inputs is None:
        return UseReport(use={e.surface: "not_provable" for e in expected})
    views = {"the audit": SampleView(inputs)} if isinstance(inputs, str) else {k: _view(v) for k, v in inputs.items()}
    idle = [] if isinstance(inputs, str) else [k for k, v in views.items() if not normalise(v.text) and not v.calls]
    seen = {k: text for k, v in views.items() if (text := normalise(v.text))} or {"the audit": ""}
    taking_part = {k: v for k, v in views.items() if k not in idle}
    use: dict[str, AuditUse] = {}
    problems: list[str] = []
    for e in expected:
        text_problems, text_proven = _text_findings(e, seen)
        tool_problems, tool_proven = _tool_findings(e, taking_part)
        found = text_problems + tool_problems
        use[e.surface] = "refuted" if found else "proven" if text_proven or tool_proven else "not_provable"
        problems += found
    return UseReport(use=use, refuted=_why(problems, idle, len(views), seen))


def _view(value: str | SampleView) -> SampleView:
    return value if isinstance(value, SampleView) else SampleView(value)


def _text_findings(e: Expected, seen: dict[str, str]) -> tuple[list[str], bool]:
    """Problems with the surface's text in the samples' inputs, and whether its text proves use."""
    missing = {t: [k for k, v in seen.items() if normalise(t) not in v] for t in e.required}
    still = {t: [k for k, v in seen.items() if normalise(t) in v] for t in e.removed}
    problems = [
        f"{e.surface}: text this set has is not in them{_where(k, seen)}: «{_shown(t)}»"
        for t, k in missing.items()
        if k
    ]
    problems += [
        f"{e.surface}: text this set removed is still in them{_where(k, seen)}: «{_shown(t)}»"
        for t, k in still.items()
        if k
    ]
    proven = bool(e.required) or any(normalise(t) in v for t in e.conditional for v in seen.values())
    return problems, proven


def _tool_findings(e: Expected, views: dict[str, SampleView]) -> tuple[list[str], bool]:
    """Problems with the tools offered in each call, and whether they prove use (nothing to say
    when the backend cannot show the offered tools)."""
    known = {k: v.calls for k, v in views.items() if v.calls is not None}
    if not known:
        return [], False
    described, described_proven = _description_findings(e, known)
    policed, policed_proven = _policy_findings(e, known, views)
    return described + policed, described_proven or policed_proven


def _description_findings(e: Expected, known: dict[str, tuple[TargetCall, ...]]) -> tuple[list[str], bool]:
    """A tool's own text in its description in every call that offers it; its removed text in none."""
    problems, proven = [], False
    for tool, text in e.tool_text:
        key = normalise(text)
        offering = {k: [c.tools[tool] for c in calls if tool in c.tools] for k, calls in known.items()}
        offering = {k: ds for k, ds in offering.items() if ds}
        lacking = [k for k, ds in offering.items() if any(key not in normalise(d) for d in ds)]
        if lacking:
            problems.append(
                f"{e.surface}: text this set gives tool {tool} is not in the description the target was offered "
                f"it with{_where(lacking, offering)}: «{_shown(text)}»"
            )
        proven = proven or bool(offering)
    for tool, text in e.tool_removed:
        key = normalise(text)
        still = [k for k, calls in known.items() if any(key in normalise(d) for d in _descriptions(calls, tool))]
        if still:
            problems.append(
                f"{e.surface}: text this set removed from tool {tool} is still in the description the target was "
                f"offered it with{_where(still, known)}: «{_shown(text)}»"
            )
    return problems, proven


def _descriptions(calls: tuple[TargetCall, ...], tool: str) -> list[str]:
    return [c.tools[tool] for c in calls if tool in c.tools]


def _policy_findings(
    e: Expected, known: dict[str, tuple[TargetCall, ...]], views: dict[str, SampleView]
) -> tuple[list[str], bool]:
    """A withheld tool offered in no call; a granted one offered in some call of every sample
    where it had a chance."""
    problems, proven = [], False
    for tool in e.withheld:
        if offered := [k for k, calls in known.items() if _descriptions(calls, tool)]:
            problems.append(
                f"{e.surface}: tool {tool}, which this set does not permit, was offered to the target"
                f"{_where(offered, known)}"
            )
    for tool in e.granted:
        chances = [k for k in known if _chance(tool, views[k], e.agents)]
        if missed := [k for k in chances if not _descriptions(known[k], tool)]:
            problems.append(
                f"{e.surface}: tool {tool}, which this set permits, was never offered to the target although "
                f"the seed offered it to the runtime and the agent may use it{_where(missed, chances)}"
            )
        proven = proven or any(_descriptions(calls, tool) for calls in known.values())
    return problems, proven


def _chance(tool: str, view: SampleView, agents: tuple[frozenset[str], ...]) -> bool:
    """Whether the seed gives the agent a chance to be offered `tool` in this sample.

    The host must have offered the tool for the whole sample (a seed's pre-registered tools),
    and every agent of this set whose allow-list holds all the host's tools the target was
    offered in the sample (the agents that may be the one that ran) must list it too. When no
    agent fits, which one ran is unknown: no chance, nothing required.
    """
    if view.host_tools is None or tool not in view.host_tools or view.calls is None:
        return False
    offered = {t for c in view.calls for t in c.tools} & view.host_tools
    fitting = [a for a in agents if offered <= a]
    return bool(fitting) and all(tool in a for a in fitting)


def _why(problems: list[str], idle: list[str], samples: int, seen: dict[str, str]) -> str | None:
    """The refutation's reason: samples the target took no part in, then the policy's problems."""
    parts = []
    if idle:
        parts.append(
            f"the target model took no part in {len(idle)} of {samples} samples ({', '.join(idle)}): no call of "
            "it and no input, so their replies are the runtime's own and their scores cannot count"
        )
    if problems:
        empty = " (the target model was given no input at all)" if not any(seen.values()) else ""
        parts.append(
            "the runtime reported the sent policy hashes, but the target model's inputs show another policy"
            f"{empty}: {'; '.join(problems)}. The runtime does not use the policy it reports (or its "
            "prompts rewrite the policy's text beyond whitespace)"
        )
    return "; ".join(parts) or None


def _where(samples: list[str], among: Mapping[str, Any] | list[str]) -> str:
    """Which samples a finding holds for, when not for all of them."""
    return "" if len(samples) == len(among) else f" (in {len(samples)} of {len(among)} samples: {', '.join(samples)})"
