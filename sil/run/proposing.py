"""The loop's side of a proposal (L3): ask the proposer, check what it cites, record what it cost.

A candidate arm asks `CandidateSource.ask` for its next mutation. The source gives the
proposer only this run's evidence (sil/search/evidence.py), re-checks every citation itself (a
proposer's word is not evidence), writes one ledger record per model call and charges it to
the run's USD budget, and records a proposer gap when nothing usable came back; a run of gaps
halts. After each verdict `record_effect` writes the observed paired effect next to the one
the mutation expected, so the next prompt sees both.

    source = CandidateSource(rc, "gate", make_proposer(rc.loaded))
    mutation = source.ask(arm_state, champion_documents)   # None: a gap, or the arm is done
    proposer_check(loaded)   # `sil check` and `sil run`: can the proposer be built, before any audit
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sil.base.errors import Halt
from sil.base.faults import crashpoint
from sil.contract.schema import LoadedContract
from sil.exec.checkitem import CheckItem
from sil.integrity.records import EffectRecord, Keys, MutationRecord, MutatorCallRecord, ProposerGapRecord, RoundRecord
from sil.policies.mutation import Mutation
from sil.run.context import RunContext
from sil.search.evidence import MutatorContext, build_context, check_citation, observed_effect
from sil.search.proposers import Proposal, ProposalRequest, Proposer, make_proposer
from sil.store.events import ProposerGap
from sil.store.runstate import ArmState, Pending
from sil_policy.credentials import find_in_data, redact_text

ARM_ORDER = ("never", "random", "gate")  # the proposer's rng stream per arm
MAX_GAP_REASON = 2000
CANDIDATE_ARMS = ("random", "gate")
NOTHING_LEFT = "the proposer has nothing left to try"  # an arm's stop reason (sil/run/certify.py reads it)


def proposer_check(loaded: LoadedContract) -> CheckItem:
    """Whether the contract's proposer can be built, checked before any audit: a plugin that
    fails to import or a misspelt offline name would otherwise stop the run only when its first
    candidate arm starts, after the baseline and the never arm have been paid for."""
    c = loaded.contract
    model = c.models.mutator.model
    if not set(CANDIDATE_ARMS) & set(c.arms):
        return CheckItem(name="proposer", status="ok", detail=f"{model}: not used (no random or gate arm)")
    try:
        proposer = make_proposer(loaded)
    except Exception as ex:  # a plugin's factory may raise anything; the user needs its words
        return CheckItem(name="proposer", status="fail", detail=f"mutator {model}: {type(ex).__name__}: {ex}")
    return CheckItem(name="proposer", status="ok", detail=f"{model} ({type(proposer).__name__})")


def without_secrets(proposal: Proposal) -> Proposal:
    """The proposal as the ledger may hold it: a mutation with a credential in any field is
    refused (a gap naming the field), and a credential in a gap, stop or call error is redacted."""
    calls = [c.model_copy(update={"error": redact_text(c.error)}) if c.error else c for c in proposal.calls]
    gap = redact_text(proposal.gap) if proposal.gap else None
    stop = redact_text(proposal.stop) if proposal.stop else None
    mutation = proposal.mutation
    if mutation is not None and (hit := find_in_data(mutation.model_dump(mode="json"))):
        gap = f"proposal refused before the ledger: its field {hit[0]} holds what looks like a secret ({hit[1]})"
        mutation = None
    return Proposal(mutation=mutation, calls=calls, gap=gap, stop=stop)


class CandidateSource:
    """One arm's dialogue with its proposer."""

    def __init__(self, rc: RunContext, arm: str, proposer: Proposer) -> None:
        self.rc = rc
        self.arm = arm
        self.proposer = proposer

    def ask(self, arm: ArmState, champion: dict[str, dict[str, Any]]) -> Mutation | None:
        """The proposer's next mutation; None after a recorded gap or when the arm is done."""
        rc, index = self.rc, arm.candidates
        context = self.context(arm) if self.proposer.reads_evidence else None
        proposal = self.proposer.propose(
            ProposalRequest(
                champion,
                self.tried(index),
                np.random.default_rng([rc.contract.seed, ARM_ORDER.index(self.arm), index]),
                index,
                rc.contract.seed,
                arm=self.arm,
                context=context,
                spend=rc.rounds.usd_left,
                wall_left=rc.rounds.wall_left,
                work_dir=rc.run_dir / "mutator",
                attempt=arm.proposer_gaps,
            )
        )
        crashpoint("propose.after_call")
        proposal = self.checked(proposal, context)
        self.record_calls(arm, index, proposal)
        if proposal.gap is not None:
            self.proposer_gap(arm, index, proposal)
            return None
        if proposal.stop is not None or proposal.mutation is None:
            arm.done, arm.stop_reason = True, proposal.stop or NOTHING_LEFT
            return None
        arm.proposer_gaps = 0
        return proposal.mutation

    def tried(self, index: int) -> set[tuple[str, str, str]]:
        return {
            m.mutation.edit_key
            for m in self.rc.book.payloads("mutation", MutationRecord)
            if m.arm == self.arm and m.index < index
        }

    def context(self, arm: ArmState) -> MutatorContext:
        rc = self.rc
        return build_context(rc.book, rc.run_dir, self.arm, arm.champion.set_id, rc.contract)

    @staticmethod
    def checked(proposal: Proposal, context: MutatorContext | None) -> Proposal:
        """The loop's own checks, independent of the proposer, before anything is recorded: no
        credential anywhere in what it returned, and evidence that is this run's."""
        proposal = without_secrets(proposal)
        if context is None or proposal.mutation is None:
            return proposal
        bad = [why for item in proposal.mutation.evidence if (why := check_citation(item, context))]
        if not bad:
            return proposal
        return Proposal(calls=proposal.calls, gap=f"fabricated evidence rejected before any audit: {bad[0]}")

    def record_calls(self, arm: ArmState, index: int, proposal: Proposal) -> None:
        """One ledger record per mutator call, charged to the run's USD budget."""
        rc = self.rc
        last = len(proposal.calls) - 1
        for n, call in enumerate(proposal.calls):
            final = proposal.mutation if n == last and proposal.gap is None else None
            rec = MutatorCallRecord(
                arm=self.arm,
                index=index,
                attempt=arm.proposer_gaps,
                call=n,
                **call.model_dump(),
                mutation_id=final.mutation_id if final else None,
                citations=list(final.evidence) if final else [],
            )
            if rc.book.once(Keys.mutator_call(self.arm, index, arm.proposer_gaps, n), rec) is not None:
                rc.state.usd += call.usd
                rc.state.mutator_usd = rc.state.mutator_usd + call.usd

    def proposer_gap(self, arm: ArmState, index: int, proposal: Proposal) -> None:
        """The proposer tried and produced nothing usable; a run of such gaps halts the run."""
        reason = proposal.gap or "no usable proposal"
        self.rc.book.once(
            Keys.proposer_gap(self.arm, index, arm.proposer_gaps),
            ProposerGapRecord(
                arm=self.arm,
                index=index,
                attempt=arm.proposer_gaps,
                reason=reason[:MAX_GAP_REASON],
                calls=len(proposal.calls),
                usd=round(sum(c.usd for c in proposal.calls), 6),
            ),
        )
        arm.proposer_gaps += 1
        self.rc.emit(ProposerGap(arm=self.arm, reason=reason))
        if arm.proposer_gaps >= self.rc.contract.stop.max_consecutive_gaps:
            raise Halt(f"{arm.proposer_gaps} consecutive proposer gaps in the {self.arm} arm: {reason}")


def record_effect(rc: RunContext, arm: str, p: Pending) -> None:
    """The observed paired effect next to the expected one: the next proposal sees both."""
    m = p.mutation
    diffs = [
        r.diff
        for r in rc.book.payloads("round", RoundRecord)
        if r.arm == arm and r.mutation_id == m.mutation_id and r.gap_reason is None
    ]
    rc.book.once(
        Keys.candidate(arm, m.mutation_id),
        EffectRecord(
            arm=arm,
            mutation_id=m.mutation_id,
            surface=m.surface,
            path=m.path,
            verdict=p.verdict or "revert",
            expected=dict(m.expected_effect),
            observed=observed_effect(diffs, rc.state.shared.pool.estimate().sigma),
            rounds=len(diffs),
        ),
    )
