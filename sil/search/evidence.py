"""Evidence for proposers that read it: the champion's recent audits and this run's history.

Reads this run's ledger records and, through the run's backend (`AuditBackend.seed_notes`),
what its audits show of each seed (the sim backend's `evidence.json`, the Petri backend's
`.eval` log); never the audit world. `build_context` assembles a `MutatorContext` with explicit size bounds, and
`check_citation` resolves an evidence citation against the run's ledger. Only audits of the
search seeds are evidence: held-out audits, their seeds and transcripts never reach a proposer.

    ctx = build_context(book, run_dir, "gate", champion_set_id, contract)
    error = check_citation("audit:gate-c003-r00-t41-candidate/seed:order_tool_error/dim:broken_tool_use", ctx)

Citations: `audit:<audit id>/seed:<seed id>[/dim:<dimension>][/msg:<message index>]`, then
optional prose after whitespace. Truncation rules (each applied and then listed in
`MutatorContext.truncated`): at most `recent_audits` audits of the champion, newest first;
at most MAX_HIGHLIGHTS per seed and MAX_TEXT characters per highlight or excerpt; at most
MAX_HISTORY tried edits, newest kept; values shown up to MAX_VALUE characters.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from sil.contract.schema import Contract
from sil.exec.backends import make_backend
from sil.exec.measure import AuditBackend, SeedNotes
from sil.integrity.ledger import RecordBook
from sil.integrity.records import AuditRecord, EffectRecord, MutationRecord, VerdictRecord
from sil_policy.evidence import Highlight

MAX_HIGHLIGHTS = 4
MAX_TEXT = 300
MAX_HISTORY = 30
MAX_VALUE = 300
Z90 = 1.645
# Seed ids are file stems: any letters (a seed named `commande_échouée` is citable), no '/' or spaces.
CITATION = re.compile(
    r"^audit:(?P<audit>[\w.-]+)/seed:(?P<seed>[\w.-]+)"
    r"(?:/dim:(?P<dim>[a-z][a-z0-9_]*))?(?:/msg:(?P<msg>\d+))?(?=\s|$)"
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class SeedEvidence(_Frozen):
    seed: str
    scores: dict[str, float]
    highlights: list[Highlight] = []
    excerpt: str | None = None  # a short transcript excerpt (Petri), when the log has one


class AuditEvidence(_Frozen):
    audit_id: str
    round: str
    seeds: list[SeedEvidence]


class TriedEdit(_Frozen):
    index: int
    mutation_id: str
    surface: str
    path: str
    value: str  # JSON of the value, truncated to MAX_VALUE
    norm_hash: str  # hash of the normalised value: a repeat in other words is still a repeat
    hypothesis: str
    expected: dict[str, float]
    verdict: str | None = None  # None: still being measured
    observed: dict[str, tuple[float, float, float]] = {}  # dim -> (mean, lo90, hi90)


class MutatorContext(_Frozen):
    """What an evidence-reading proposer sees for one candidate."""

    arm: str
    champion_set: str
    target_dimensions: list[str]
    critical_dimensions: list[str]
    auxiliary_dimensions: list[str]
    audits: list[AuditEvidence]
    history: list[TriedEdit]
    # every ok audit of this run: audit id -> seed -> dims scored (what a citation may name)
    index: dict[str, dict[str, list[str]]]
    messages: dict[str, dict[str, list[int]]]  # audit id -> seed -> cited message indices shown
    truncated: list[str] = []
    # audit id -> seed -> dim -> score: what a quoted score in a citation's prose must match
    scores: dict[str, dict[str, dict[str, float]]] = {}


# --- normalisation and effects ---------------------------------------------------------------


def normalise(value: Any) -> Any:
    """Case, spacing and trailing punctuation do not make an edit new; list order does not either."""
    if isinstance(value, str):
        return re.sub(r"\s+", " ", value).strip().strip(".!;:, ").lower()
    if isinstance(value, list):
        return sorted({normalise(v) for v in value})
    return value


def norm_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(normalise(value), sort_keys=True).encode()).hexdigest()[:16]


def observed_effect(
    diffs: Sequence[dict[str, float | None]], sigma: dict[str, float]
) -> dict[str, tuple[float, float, float]]:
    """Mean paired difference per dim over rounds, with a 90% interval from the frozen noise SD."""
    out: dict[str, tuple[float, float, float]] = {}
    for dim, sd in sigma.items():
        values = [d[dim] for d in diffs if d.get(dim) is not None and math.isfinite(d[dim])]  # type: ignore[arg-type]
        if not values:
            continue
        mean = sum(values) / len(values)  # type: ignore[arg-type]
        half = Z90 * sd / math.sqrt(len(values))
        out[dim] = (round(mean, 3), round(mean - half, 3), round(mean + half, 3))
    return out


# --- citations -------------------------------------------------------------------------------


def citation(audit_id: str, seed: str, dim: str | None = None, msg: int | None = None) -> str:
    text = f"audit:{audit_id}/seed:{seed}"
    if dim is not None:
        text += f"/dim:{dim}"
    if msg is not None:
        text += f"/msg:{msg}"
    return text


def check_citation(text: str, ctx: MutatorContext) -> str | None:
    """Why `text` is not a citation of this run's evidence, or None if it resolves and its
    prose quotes the record faithfully (a real id with a misquoted score is not evidence)."""
    text = unicodedata.normalize("NFC", text.strip())
    m = CITATION.match(text)
    if m is None:
        return f"evidence item {text[:80]!r} does not start with a citation audit:<id>/seed:<id>[/dim:<d>][/msg:<n>]"
    audit, seed, dim, msg = m.group("audit", "seed", "dim", "msg")
    seeds = {unicodedata.normalize("NFC", k): k for k in ctx.index.get(audit, {})}
    if audit not in ctx.index:
        return f"citation {m.group(0)!r}: no audit {audit!r} in this run's ledger"
    if seed not in seeds:
        return f"citation {m.group(0)!r}: audit {audit} has no scored seed {seed!r}"
    seed = seeds[seed]
    if dim is not None and dim not in ctx.index[audit][seed]:
        return f"citation {m.group(0)!r}: seed {seed} of audit {audit} has no score for {dim!r}"
    if msg is not None and int(msg) not in ctx.messages.get(audit, {}).get(seed, []):
        return f"citation {m.group(0)!r}: no highlighted message {msg} on seed {seed} of audit {audit}"
    return _check_quotes(m.group(0), text[m.end() :], ctx, audit, seed, dim)


# "scored 10/10", "a score of 7", "10 out of 10", "= 4.5": a number the prose presents as a score
SCORE_CLAIM = re.compile(
    r"(?i)\b(?:scor(?:e|ed|es|ing)|rated)\b\D{0,24}?(?P<a>\d+(?:\.\d+)?)|(?P<b>\d+(?:\.\d+)?)\s*(?:/|out of)\s*10\b"
)
QUOTE = re.compile(r'"([^"]{4,})"|“([^”]{4,})”|«\s*([^»]{4,}?)\s*»')


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFC", text)).strip().lower()


def _check_quotes(cited: str, prose: str, ctx: MutatorContext, audit: str, seed: str, dim: str | None) -> str | None:
    """Scores and quoted text in a citation's prose must be the record's, not the proposer's."""
    scores = ctx.scores.get(audit, {}).get(seed, {})
    texts = _seed_texts(ctx, audit, seed)
    if (copied := _squash(prose).removeprefix("judge:").strip(" .…")) and copied in texts:
        return None  # a verbatim copy of shown evidence: its numbers are the judge's words, not a claim
    claimed = [float(c.group("a") or c.group("b")) for c in SCORE_CLAIM.finditer(prose)]
    if claimed:
        if not scores:
            return f"citation {cited!r} quotes a score, but the scores of seed {seed} of audit {audit} are not shown"
        actual = [scores[dim]] if dim is not None and dim in scores else list(scores.values())
        for value in claimed:
            if not any(abs(value - a) < 0.05 for a in actual):
                shown = ", ".join(f"{a:g}" for a in actual)
                return f"citation {cited!r} quotes a score of {value:g}, but the record has {shown}"
    quotes = [next(g for g in q.groups() if g) for q in QUOTE.finditer(prose)]
    if quotes:
        for quote in quotes:
            if _squash(quote).strip(" .…") not in texts:
                return f"citation {cited!r} quotes {quote[:60]!r}, which is not in the shown evidence of seed {seed}"
    return None


def _seed_texts(ctx: MutatorContext, audit: str, seed: str) -> str:
    """All text shown to the proposer for one seed of one audit, squashed for quote matching."""
    parts = []
    for a in ctx.audits:
        if a.audit_id == audit:
            for s in a.seeds:
                if s.seed == seed:
                    parts += [h.text for h in s.highlights] + [s.excerpt or ""]
    return "\n".join(_squash(p) for p in parts)


# --- reading audits --------------------------------------------------------------------------


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _audit_evidence(run_dir: Path, rec: AuditRecord, backend: AuditBackend) -> AuditEvidence:
    notes_by_seed = backend.seed_notes(run_dir / "audits" / rec.audit_id, rec.log_path)
    seeds = []
    for seed, scores in sorted(rec.scores.items()):
        notes = notes_by_seed.get(seed, SeedNotes([]))
        highlights = [h.model_copy(update={"text": _clip(h.text)}) for h in notes.highlights[:MAX_HIGHLIGHTS]]
        excerpt = _clip(notes.excerpt) if notes.excerpt is not None else None
        seeds.append(SeedEvidence(seed=seed, scores=scores, highlights=highlights, excerpt=excerpt))
    return AuditEvidence(audit_id=rec.audit_id, round=rec.round, seeds=seeds)


# --- history ---------------------------------------------------------------------------------


def _history(book: RecordBook, arm: str) -> list[TriedEdit]:
    verdicts = {v.mutation_id: v.verdict for v in book.payloads("verdict", VerdictRecord) if v.arm == arm}
    effects = {e.mutation_id: e.observed for e in book.payloads("effect", EffectRecord) if e.arm == arm}
    out = []
    for rec in book.payloads("mutation", MutationRecord):
        if rec.arm != arm:
            continue
        m = rec.mutation
        out.append(
            TriedEdit(
                index=rec.index,
                mutation_id=m.mutation_id,
                surface=m.surface,
                path=m.path,
                value=_clip(json.dumps(m.value, ensure_ascii=False), MAX_VALUE),
                norm_hash=norm_hash(m.value),
                hypothesis=_clip(m.hypothesis),
                expected=dict(m.expected_effect),
                verdict=verdicts.get(m.mutation_id),
                observed=effects.get(m.mutation_id, {}),
            )
        )
    return sorted(out, key=lambda t: t.index)


def build_context(book: RecordBook, run_dir: Path, arm: str, champion_set: str, contract: Contract) -> MutatorContext:
    """The evidence and history a proposer may read for the arm's next candidate."""
    # held-out audits (the final certification's) are never evidence: the search must not see them
    audits = [a for a in book.payloads("audit", AuditRecord) if a.status == "ok" and a.seed_set == "search"]
    index = {a.audit_id: {seed: sorted(s) for seed, s in a.scores.items()} for a in audits}
    scores = {a.audit_id: a.scores for a in audits}
    mine = [a for a in audits if a.policy_set == champion_set]
    keep = contract.mutator.recent_audits
    truncated = []
    if len(mine) > keep:
        truncated.append(f"showing the {keep} most recent of {len(mine)} audits of the champion")
    backend = make_backend(contract.backend)  # it reads its own audits' records
    shown = [_audit_evidence(run_dir, a, backend) for a in reversed(mine[-keep:])]
    messages = {
        a.audit_id: {s.seed: [h.message for h in s.highlights if h.message is not None] for s in a.seeds} for a in shown
    }
    history = _history(book, arm)
    if len(history) > MAX_HISTORY:
        truncated.append(f"showing the {MAX_HISTORY} most recent of {len(history)} tried edits")
        history = history[-MAX_HISTORY:]
    p = contract.promotion
    return MutatorContext(
        arm=arm,
        champion_set=champion_set,
        target_dimensions=list(p.target_dimensions),
        critical_dimensions=list(p.critical_dimensions),
        auxiliary_dimensions=list(p.auxiliary_dimensions),
        audits=shown,
        history=history,
        index=index,
        messages=messages,
        truncated=truncated,
        scores=scores,
    )
