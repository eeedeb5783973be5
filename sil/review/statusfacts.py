"""What `sil runs` and `sil status` show, as plain data, and the text of `sil status` (no pydantic).

The quick reading (glance.py) and the full one (status.py) both end in these, so a run reads
the same whichever of them read it.

    for line in status_lines(facts): print(line)
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from sil.base.locks import OWNER_SUFFIX, RUN_LOCK
from sil.review.usecounts import NOT_PROVABLE_SHORT, words

LONG_FLOAT = re.compile(r"-?\d+\.\d{4,}")
FINAL_PHASES = ("done", "halted")


def readable(line: str) -> str:
    """The line with raw floats (0.33897813308452085) cut to three significant digits."""
    return LONG_FLOAT.sub(lambda m: f"{float(m.group()):.3g}", line)


def is_running(run_dir: Path) -> bool:
    """True while a live process on this host holds the run's lock (owner file present)."""
    try:
        info = json.loads((run_dir / (RUN_LOCK + OWNER_SUFFIX)).read_text())
        if info.get("host") != socket.gethostname():
            return True  # another host: cannot check its pid, trust the owner file
        os.kill(int(info["pid"]), 0)
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def stopped(phase: str, running: bool) -> bool:
    """Neither running nor finished: interrupted (Ctrl-C, a crash, a killed process)."""
    return not running and phase not in FINAL_PHASES and phase != "unknown"


def resume_hint(run_dir: Path) -> str:
    """The command that resumes the run, from the project root."""
    project = run_dir.parents[2]  # a sweep run's project is its own workspace
    cd = (
        f"cd {project.relative_to(project.parents[2])} && "
        if project.parent.name == "sweeps" and project.parents[1].name == "state"
        else ""
    )
    return f"{cd}sil run --run-id {run_dir.name}"


class VerdictLine(NamedTuple):
    arm: str
    mutation_id: str
    verdict: str
    reason: str
    use: str = ""  # its audits' proof of use in words (sil/review/usecounts.py)


class ChampionLine(NamedTuple):
    arm: str
    set_id: str
    keeps: int
    words: str


class StatusFacts(NamedTuple):
    """What `sil status` prints (the fields of status.RunStatus it reads)."""

    run_id: str
    running: bool
    phase: str
    arm: str | None
    candidate: str | None
    look: int | None
    looks: int | None
    audits: int
    audits_planned: int | None
    max_audits: int | None
    gaps: int
    usd: float
    max_usd: float | None
    alpha_spent: float
    alpha_run: float | None
    elapsed_s: float
    eta_s: float | None
    halt_reason: str | None
    stopped: bool
    resume: str
    champions: list[ChampionLine]  # in the arms' order
    last_verdicts: list[VerdictLine]
    problems: list[str]
    two_stage: bool = False  # the search spends a fixed level per confirmation: no run budget to show
    confirmations: int = 0
    use: dict[str, dict[str, int]] = {}  # per surface: pair audits that proved / could not prove its use


class OverviewRow(NamedTuple):
    """One run of `sil runs` (the fields of status.RunOverview, in its order: `--json` prints them)."""

    run_id: str
    contract_id: str | None
    contract_hash: str | None
    backend: str | None
    simulated: bool
    phase: str
    audits: int
    max_audits: int | None
    usd: float
    keeps: dict[str, int]
    demoted: dict[str, int]
    champion: str
    verified: bool
    verify_note: str


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    m, sec = divmod(int(seconds), 60)
    return f"{m}m{sec:02d}s" if m else f"{sec}s"


def error_line(st: StatusFacts) -> str:
    """Where the run's error goes: a run budget (fwer, elond) or a fixed level per search step."""
    if st.two_stage:
        return (
            f"error design two-stage: {st.confirmations} search confirmations at a fixed α_search each; "
            "the guarantee is the final certification's"
        )
    return f"error budget α spent {st.alpha_spent:.4f} of {st.alpha_run if st.alpha_run is not None else '—'}"


def status_lines(st: StatusFacts) -> list[str]:
    """The human-readable `sil status` text."""
    of: Callable[[int, int | None], str] = lambda n, total: f"{n}/{total}" if total is not None else str(n)  # noqa: E731
    state = " (running)" if st.running else (f" — stopped; resume with: {st.resume}" if st.stopped else "")
    lines = [
        f"run {st.run_id}: {st.phase}{state}",
        f"audits {of(st.audits, st.audits_planned)} (limit {st.max_audits}), gaps {st.gaps}, "
        f"USD {st.usd:.2f} of {st.max_usd if st.max_usd is not None else '—'}",
        error_line(st),
        f"elapsed {_dur(st.elapsed_s)}" + ("" if st.stopped else f", ETA {_dur(st.eta_s)}"),
    ]
    if st.arm:
        look = f", look {st.look} of {st.looks}" if st.look is not None and st.looks else ""
        lines.append(f"arm {st.arm}: candidate {st.candidate or '— (between candidates)'}{look}")
    for c in st.champions:
        if c.keeps:
            lines.append(f"{c.arm} champion {c.set_id}: {c.words}")
    for v in st.last_verdicts:
        lines.append(
            f"  {v.arm} {v.mutation_id}: {v.verdict.upper()} — {v.reason}" + (f" [use: {v.use}]" if v.use else "")
        )
    lines += [f"use shown in pair audits, {surface}: {words(counts)}" for surface, counts in st.use.items()]
    if any(c.get("not_provable") for c in st.use.values()):
        lines.append(NOT_PROVABLE_SHORT)
    if st.halt_reason:
        lines.append(f"HALTED: {st.halt_reason} — fix the cause, then run the same `sil run` again to resume")
    lines += [f"note: {p}" for p in st.problems]
    return [readable(line) for line in lines]
