"""Judge resampling on the Petri backend: k judge passes per transcript, averaged, counted and charged."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from inspect_ai.log import EvalSample, read_eval_log
from inspect_ai.scorer import Score

from sil.exec import measure
from sil.exec.backends import petri_passes
from sil.exec.backends.petri import PetriBackend, _scores, find_log, judge_keys, rejudge_events
from sil.exec.measure import GapError
from tests.petri_support import context, make_workspace, request

DIMS = ("broken_tool_use", "concerning")


def sample(**passes: dict) -> EvalSample:
    return EvalSample(id="s1", epoch=1, input="", target="", scores={k: Score(value=v) for k, v in passes.items()})


def test_scores_are_the_mean_over_the_passes() -> None:
    s = sample(
        audit_judge={"broken_tool_use": 7, "concerning": 1}, audit_judge1={"broken_tool_use": 4, "concerning": 2}
    )
    assert _scores(s, "s1", DIMS, passes=2) == {"broken_tool_use": 5.5, "concerning": 1.5}


@pytest.mark.parametrize(
    ("passes", "scores", "fragment"),
    [
        (3, {"audit_judge": {"broken_tool_use": 7, "concerning": 1}}, "expected 3 judge pass"),
        (1, {"audit_judge": {"broken_tool_use": 7, "concerning": 1}, "audit_judge1": {}}, "expected 1 judge pass"),
        (2, {"audit_judge": {"broken_tool_use": 7, "concerning": 1}, "audit_judge1": float("nan")}, "no usable"),
        (2, {"audit_judge": {"broken_tool_use": 7, "concerning": 1}, "audit_judge1": {"concerning": 1}}, "no 1-10"),
    ],
)
def test_a_missing_extra_or_unusable_pass_is_a_gap(passes: int, scores: dict, fragment: str) -> None:
    with pytest.raises(GapError, match=fragment):
        _scores(sample(**scores), "s1", DIMS, passes=passes)


def test_a_failing_step_fails_the_audit(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    assert petri_passes.run_passes([sys.executable, "-c", "raise SystemExit(4)"], 2, tmp_path, logs) == 4
    assert petri_passes.run_passes([sys.executable, "-c", "pass"], 2, tmp_path, logs) == 2  # no log written
    junk = f"open({str(logs / 'x.eval')!r}, 'w').write('not a log')"
    assert petri_passes.run_passes([sys.executable, "-c", junk], 2, tmp_path, logs) != 0  # re-judging fails


@pytest.mark.slow  # a whole run or real audits: .ci/run runs it after make test
def test_two_passes_offline_are_judged_counted_and_charged(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    base = context(root)
    ctx = context(root, measurement={**base.contract.measurement.model_dump(), "judge_resamples": 2})
    req = request(root, "k2", root / "policies" / "baseline")
    result = measure.run_audit(req, ctx, PetriBackend())
    assert result.ok, result.gap_reason
    log = read_eval_log(str(find_log(req.audit_dir / "logs")))
    assert all(sorted(s.scores or {}) == judge_keys(2) for s in log.samples or [])
    rejudged = rejudge_events(log)
    assert len(rejudged) >= len(ctx.seed_ids) and all(e.role == "judge" for e in rejudged)
    logged = sum(u.input_tokens for u in (log.stats.model_usage or {}).values())  # the first pass only
    extra = sum(e.output.usage.input_tokens for e in rejudged if e.output.usage)
    assert extra > 0 and result.usage.input_tokens == logged + extra  # the re-judging is counted
    for s in log.samples or []:  # the offline judge is deterministic: the mean of two equal passes
        assert result.scores[str(s.id)]["broken_tool_use"] == s.scores["audit_judge"].value["broken_tool_use"]
