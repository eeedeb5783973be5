"""A resumed run never pays twice for a mutator call: answers are replayed, lost calls charged."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from inspect_ai.model import ModelOutput, get_model

from sil.exec.modelcalls import CallJournal, CallKey, Lost
from sil.search.proposers.llm import LLMProposer, render_prompt
from tests.search.test_llm_mutator import PRICED, champion, context, loaded, request  # noqa: F401  (fixture)


class Counting(LLMProposer):
    """The LLM mutator with a paid-model price, answering through the offline scripted model."""

    def __init__(self) -> None:
        super().__init__(loaded("anthropic/claude-sonnet-4-5", PRICED), model=get_model("scripted/mutator"))
        self.paid = 0

    def generate(self, messages, wall_left=None):
        self.paid += 1
        return super().generate(messages, wall_left)


def first_key(proposer: LLMProposer, documents: dict, attempt: int = 0) -> CallKey:
    prompt = render_prompt(proposer.loaded, documents, context())
    return CallKey("gate", 0, attempt, 0, hashlib.sha256(prompt.encode()).hexdigest())


def test_a_repeated_question_replays_the_saved_answer(champion, tmp_path: Path) -> None:  # noqa: F811
    proposer = Counting()
    first = proposer.propose(request(champion, context(), tmp=tmp_path))
    again = proposer.propose(request(champion, context(), tmp=tmp_path))
    assert proposer.paid == 1  # the second ask (a resume after a crash) made no model call
    assert first.mutation is not None and again.mutation == first.mutation
    assert again.calls == first.calls and first.calls[0].usd > 0  # still charged once, by the ledger


def test_a_retry_after_a_gap_is_a_new_question(champion, tmp_path: Path) -> None:  # noqa: F811
    proposer = Counting()
    proposer.propose(request(champion, context(), tmp=tmp_path))
    retry = request(champion, context(), tmp=tmp_path)
    proposer.propose(type(retry)(**{**retry.__dict__, "attempt": 1}))
    assert proposer.paid == 2


def test_a_call_lost_to_a_crash_is_charged_its_bound_then_made_again(champion, tmp_path: Path) -> None:  # noqa: F811
    proposer = Counting()
    key = first_key(proposer, champion)
    bound = proposer.bound(render_prompt(proposer.loaded, champion, context()), 0)
    CallJournal(tmp_path, key).begin(bound, Lost())  # started, then the process died
    proposal = proposer.propose(request(champion, context(), tmp=tmp_path))
    assert proposer.paid == 1 and proposal.mutation is not None
    lost, made = proposal.calls
    assert lost.usd == pytest.approx(bound) and "1 call(s) made before a crash" in (lost.error or "")
    assert made.error is None and made.output_sha256
    replayed = proposer.propose(request(champion, context(), tmp=tmp_path))
    assert proposer.paid == 1 and replayed.calls == proposal.calls  # the lost charge survives a replay


def test_a_torn_answer_is_never_trusted(champion, tmp_path: Path) -> None:  # noqa: F811
    proposer = Counting()
    proposer.propose(request(champion, context(), tmp=tmp_path))
    (saved,) = (tmp_path / "calls").glob("*.output.json")
    saved.write_text('{"model": "x", "choices": [')
    journal = CallJournal(tmp_path, first_key(proposer, champion))
    assert journal.replay(ModelOutput) is None and journal.lost(ModelOutput).calls == 1
    proposal = proposer.propose(request(champion, context(), tmp=tmp_path))
    assert proposer.paid == 2 and proposal.calls[0].error and proposal.mutation is not None


def test_without_a_work_dir_nothing_is_journalled(champion) -> None:  # noqa: F811
    proposer = Counting()
    proposer.propose(request(champion, context()))
    proposer.propose(request(champion, context()))
    assert proposer.paid == 2
