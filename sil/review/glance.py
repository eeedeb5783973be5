"""`sil runs` and `sil status` read quickly: the run folder's JSON read directly, without pydantic.

Loading the models (pydantic and ~90 classes) takes longer than the whole command should, so a
run is first read here: state.json, contract.json and the ledger with `json`, each field these
views show checked for the type the model would give it, and the ledger checked by
integrity/quickcheck.py. Whenever anything is missing, of another type, or does not verify, the
run is read again the full way (runview.load_run and status.py) and shown from that, so a run
shows here only what the full reading shows (tests/review/test_glance.py compares the two).

    row = overview(run_dir)        # a row of `sil runs`
    facts = status(run_dir)        # what `sil status` prints
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from sil.contract.certifies import certified_arms
from sil.exec.auditcount import plan_counts
from sil.integrity.chain import Entry, read_entries
from sil.integrity.quickcheck import quick_check
from sil.policies.setid import set_id_of
from sil.review.runpaths import CONTRACT_SNAPSHOT, LEDGER
from sil.review.statusfacts import (
    FINAL_PHASES,
    ChampionLine,
    OverviewRow,
    StatusFacts,
    VerdictLine,
    is_running,
    resume_hint,
    stopped,
)
from sil.review.usecounts import candidate_rounds, surface_counts, verdict_counts, words
from sil.stats.alphaspent import alpha_spent
from sil.store.standing import ArmStanding, arm_standing

STATE_FILE = "state.json"
LAST_VERDICTS = 5
PHASES = frozenset({"preflight", "baseline", "never", "random", "gate", "final", "done", "halted"})
NUMBER = (int, float)
OPTIONAL_STR = (str, type(None))


class Unsure(Exception):
    """The quick reading cannot vouch for what it read: read the run the full way."""


def field(data: Any, key: str, types: tuple[type, ...]) -> Any:
    """`data[key]` if it is exactly of one of `types` (no bool for a number), else Unsure."""
    if not isinstance(data, dict) or key not in data or type(data[key]) not in types:
        raise Unsure(key)
    return data[key]


def _file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))  # UTF-8 only, as the models read it
    except (OSError, ValueError) as ex:
        raise Unsure(str(path)) from ex
    if not isinstance(data, dict):
        raise Unsure(str(path))
    return data


class Arm(NamedTuple):
    name: str
    set_id: str
    changed: bool  # its champion is not the run's starting policy
    keeps: int
    pending: tuple[str, int] | None  # the candidate in words, and the rounds it has had


class Glance(NamedTuple):
    run_dir: Path
    state: dict[str, Any]
    contract: dict[str, Any]
    arms: list[Arm]
    records: list[Entry]


def _hashes(policy_set: Any) -> dict[str, str]:
    hashes = field(policy_set, "hashes", (dict,))
    if any(type(v) is not str for v in hashes.values()):
        raise Unsure("hashes")
    return dict(hashes)


def _pending(pending: Any) -> tuple[str, int] | None:
    if pending is None:
        return None
    m = field(pending, "mutation", (dict,))
    words = " ".join((field(m, "mutation_id", (str,)), f"{field(m, 'surface', (str,))}.{field(m, 'path', (str,))}"))
    trial = field(pending, "trial", (dict,))
    screen = field(trial, "screen", (dict, type(None)))
    return words, len(field(trial, "confirm", (list,))) + (1 if screen is not None else 0)


def _arms(state: dict[str, Any]) -> list[Arm]:
    origin = _hashes(field(state, "origin", (dict,)))
    found = []
    for name, arm in field(state, "arms", (dict,)).items():
        champion = _hashes(field(arm, "champion", (dict,)))
        pending = _pending(field(arm, "pending", (dict, type(None))))
        found.append(Arm(name, set_id_of(champion), champion != origin, field(arm, "keeps", (int,)), pending))
    return found


def read_glance(run_dir: Path, records: list[Entry] | None = None) -> Glance:
    """The run's state, contract snapshot and records (`records`: already read and verified)."""
    state, contract = _file(run_dir / STATE_FILE), _file(run_dir / CONTRACT_SNAPSHOT)
    if records is None:
        try:
            records = read_entries((run_dir / LEDGER).read_bytes())
        except OSError as ex:
            raise Unsure("ledger") from ex
    if records is None:
        raise Unsure("ledger")
    return Glance(run_dir, state, contract, _arms(state), records)


def _standings(g: Glance) -> list[ArmStanding]:
    """Each arm's champion standing, checked as champion.ChampionStatus would check it."""
    found = [arm_standing(a.name, a.set_id, a.changed, g.records) for a in g.arms]
    for st in found:
        if type(st.certified) not in (bool, type(None)) or any(type(s) is not str for s in st.certified_sets):
            raise Unsure("certify record")
        for d in st.demotions:
            if d.cause not in ("certification", "replication") or type(d.policy_set) is not str:
                raise Unsure("demote record")
            if type(d.mutation_id) not in OPTIONAL_STR or type(d.reason) is not str:
                raise Unsure("demote record")
    return found


def _phase(g: Glance) -> str:
    phase = field(g.state, "phase", (str,))
    if phase not in PHASES:
        raise Unsure("phase")
    return str(phase)


def overview_of(g: Glance, records: int, checkpoints: int) -> OverviewRow:
    run = next((e.payload for e in g.records if e.type == "contract"), {})
    ids = {k: run.get(k) for k in ("contract_id", "contract_hash", "backend")}
    if any(type(v) not in OPTIONAL_STR for v in ids.values()):
        raise Unsure("contract record")
    phase, champs = _phase(g), _standings(g)
    return OverviewRow(
        run_id=g.run_dir.name,
        **ids,
        simulated=any(e.simulated for e in g.records),
        phase=f"stopped ({phase})" if stopped(phase, is_running(g.run_dir)) else phase,
        audits=field(g.state, "audits", (int,)),
        max_audits=field(field(g.contract, "budget", (dict,)), "max_audits", (int,)),
        usd=float(field(g.state, "usd", NUMBER)),
        keeps={a.name: a.keeps for a in g.arms},
        demoted={c.arm: c.demoted for c in champs if c.demoted},
        champion=next((c.words for c in champs if c.arm == "gate"), ""),
        verified=True,
        verify_note=f"{records} records, {checkpoints} checkpoints",
    )


def _spent(state: dict[str, Any]) -> float:
    """`state.shared.budget.spent` (gate.ErrorBudget), with the bounds the model checks."""
    b = field(field(state, "shared", (dict,)), "budget", (dict,))
    mode, tested, kept = field(b, "mode", (str,)), field(b, "tested", (list,)), field(b, "kept", (list,))
    alpha, most = float(field(b, "alpha_run", NUMBER)), field(b, "max_confirmations", (int,))
    if mode not in ("fwer", "elond", "fixed") or not 0 < alpha < 1 or most < 1:
        raise Unsure("budget")
    if any(type(t) not in NUMBER for t in tested) or any(type(k) is not bool for k in kept):
        raise Unsure("budget")
    return alpha_spent(mode, alpha, most, [float(t) for t in tested], kept, field(b, "recycle", (bool,)))


def _planned(contract: dict[str, Any]) -> int:
    """`startchecks.planned_audits(contract).total` from the snapshot's numbers."""
    b, p = field(contract, "budget", (dict,)), field(contract, "promotion", (dict,))
    arms, arm_audits = field(contract, "arms", (list,)), field(b, "arm_audits", (dict,))
    if any(type(a) is not str for a in arms) or any(type(n) is not int for n in arm_audits.values()):
        raise Unsure("arms")
    certify_rounds, certify_random = field(b, "certify_rounds", (int,)), b.get("certify_random", False)
    if type(certify_random) is not bool:  # absent in snapshots written before it existed: the default
        raise Unsure("certify_random")
    return plan_counts(
        arms,
        arm_audits,
        field(p, "baseline_k", (int,)),
        certify_rounds,
        field(b, "final_check_rounds", (int,)),
        field(b, "max_audits", (int,)),
        field(field(contract, "measurement", (dict,)), "certify_on", (str,)),
        certified_arms(arms, certify_rounds, certify_random),
    ).total


def _verdict(payload: dict[str, Any]) -> VerdictLine:
    return VerdictLine(*(field(payload, k, (str,)) for k in ("arm", "mutation_id", "verdict", "reason")))


def status_of(g: Glance) -> StatusFacts:
    s, budget, phase = g.state, field(g.contract, "budget", (dict,)), _phase(g)
    planned, current = _planned(g.contract), next((a for a in g.arms if a.name == phase), None)
    candidate, look = current.pending if current and current.pending else (None, None)
    audits, elapsed = field(s, "audits", (int,)), float(field(s, "elapsed_s", NUMBER))
    running = is_running(g.run_dir)
    halted = stopped(phase, running)
    eta = None
    if planned and audits and phase not in FINAL_PHASES and not halted:
        eta = round(elapsed / audits * max(planned - audits, 0), 1)
    arm = current.name if current else None
    looks = field(s, "replicate_k", (int,)) + 1 if arm == "gate" else (1 if arm == "random" else None)
    audit_records = [e.payload for e in g.records if e.type == "audit"]
    rounds = [e.payload for e in g.records if e.type == "round"]
    verdicts = [
        v._replace(use=words(verdict_counts(audit_records, candidate_rounds(rounds, v.arm, v.mutation_id))))
        for v in (_verdict(e.payload) for e in g.records if e.type == "verdict")
    ]
    return StatusFacts(
        run_id=g.run_dir.name,
        running=running,
        phase=phase,
        arm=arm,
        candidate=candidate,
        look=look,
        looks=looks,
        audits=audits,
        audits_planned=planned,
        max_audits=field(budget, "max_audits", (int,)),
        gaps=field(s, "gaps", (int,)),
        usd=float(field(s, "usd", NUMBER)),
        max_usd=float(field(budget, "max_usd", NUMBER)),
        alpha_spent=_spent(s),
        alpha_run=float(field(field(g.contract, "promotion", (dict,)), "alpha_run", NUMBER)),
        elapsed_s=round(elapsed, 1),
        eta_s=eta,
        halt_reason=field(s, "halt_reason", OPTIONAL_STR),
        stopped=halted,
        resume=resume_hint(g.run_dir),
        champions=[ChampionLine(c.arm, c.set_id, c.keeps, c.words) for c in _standings(g)],
        last_verdicts=verdicts[-LAST_VERDICTS:],
        problems=[],
        two_stage=field(field(field(s, "shared", (dict,)), "budget", (dict,)), "mode", (str,)) == "fixed",
        confirmations=len(field(field(field(s, "shared", (dict,)), "budget", (dict,)), "tested", (list,))),
        use=surface_counts(audit_records),
    )


# What the quick reading gives up on: the run is then read the full way.
DOUBT = (Unsure, LookupError, TypeError, ValueError, ArithmeticError)


def overview(run_dir: Path) -> OverviewRow:
    """The run's row of `sil runs`: read quickly, or the full way when the quick reading is unsure."""
    try:
        found = quick_check(run_dir / LEDGER, run_dir.parents[2])
        if found is not None:
            return overview_of(read_glance(run_dir, found.entries), found.records, found.checkpoints)
    except DOUBT:
        pass
    from sil.review.runview import load_run
    from sil.review.status import overview_row, run_overview

    return overview_row(run_overview(load_run(run_dir)))


def status(run_dir: Path) -> StatusFacts:
    """What `sil status` prints of the run: read quickly, or the full way when unsure."""
    try:
        return status_of(read_glance(run_dir))
    except DOUBT:
        pass
    from sil.review.runview import load_run
    from sil.review.status import run_status, status_facts

    return status_facts(run_status(load_run(run_dir)))
