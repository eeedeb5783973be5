"""A review that reads the same everywhere (issue 36, items 5-12): each test names its item.

Most share the finished tiny run of tests/review/test_review.py (read-only) or a private copy.
"""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from sil.contract.schema import load_contract
from sil.review.summary import (
    DIRECTION_LINE,
    ArmLine,
    Summary,
    conclusion_text,
    error_words,
    noise_line,
    render,
)
from sil.stats.fitness import RoundStat
from tests.cli.test_cli import invoke
from tests.conftest import REPO
from tests.review.test_review import RUN, copy_of, done  # noqa: F401 - the shared finished run

TARGET = "broken_tool_use"


def _arm(name: str, change: float, **kw: object) -> ArmLine:
    fields: dict[str, object] = dict(
        arm=name,
        audits=130,
        candidates=9,
        keeps=3,
        reverts=6,
        changed=True,
        target_change=(change, change - 0.3, change + 0.3),
        worst_critical=("input_hallucination", 0.24),
        stop_reason="arm budget (130 audits) spent; champion certified on the held-out seeds",
        champion="certified against the start",
        standing="certified",
        measured_on="heldout",
    )
    fields.update(kw)
    return ArmLine.model_validate(fields)


def _summary(**kw: object) -> Summary:
    fields: dict[str, object] = dict(
        run_id="r1",
        phase="done",
        halt_reason=None,
        backend="sim",
        note="simulated audit",
        target=TARGET,
        baseline_mean=5.26,
        never_mean=5.16,
        drift=-0.09,
        noise_sigma={TARGET: 0.76},
        noise_df={TARGET: 60},
        noise_pairs=12,
        noise_candidates=5,
        aa_sigma={TARGET: 1.02},
        aa_mean_diff=-0.186,
        arms=[_arm("random", -3.58, audits=20), _arm("gate", -2.88)],
        audits=422,
        gaps=7,
        usd=0.0,
        elapsed_s=79.0,
        alpha_run=0.1,
        alpha_spent=2.0,
        confirmations=5,
        error_design="two_stage",
        alpha_search=0.4,
        alpha_certify=0.05,
        random_certified=True,
    )
    fields.update(kw)
    return Summary.model_validate(fields)


# ---- 5. the conclusion says how the gate compares with the random arm on this run ----------------


def test_5_the_conclusion_compares_the_arms_on_this_run_and_points_to_the_many_world_figures() -> None:
    text = conclusion_text(_summary())
    assert "improves broken_tool_use by 2.88" in text
    assert "-2.88 vs -3.58" in text and "the random arm delivered 0.70 more" in text
    assert "docs/results/arms-default.md" in text
    gate_better = conclusion_text(_summary(arms=[_arm("random", -1.0), _arm("gate", -2.0)]))
    assert "the gate delivered 1.00 more" in gate_better


def test_5_a_rolled_back_random_arm_delivered_the_start() -> None:
    coin = _arm("random", -3.0, standing="rolled_back", champion="rolled back to the starting policy")
    text = conclusion_text(_summary(arms=[coin, _arm("gate", -2.0)]))
    assert "-2.00 vs +0.00" in text and "the gate delivered 2.00 more" in text


def test_5_a_rolled_back_gate_says_when_its_certification_was_underpowered() -> None:
    from sil.review.summary import Confirmation
    from sil.stats.horizon import Outlook

    gate = _arm("gate", 0.0, changed=False, standing="rolled_back", champion="rolled back to the starting policy")
    short = Outlook(power=0.53, looks=70, goal=0.8, needed=118).words()
    weak = _summary(
        arms=[_arm("random", -1.0), gate],
        confirmation=Confirmation(certified=False, certified_on="heldout", short_outlook=short),
    )
    text = conclusion_text(weak)
    assert "no robust improvement" in text and "an underpowered certification" in text
    assert "planned power 0.53 for a clean champion in 70 rounds; about 118 rounds reach 0.8" in text
    plain = _summary(
        arms=[_arm("random", -1.0), gate], confirmation=Confirmation(certified=False, certified_on="heldout")
    )
    assert "underpowered" not in conclusion_text(plain)


def test_5_the_readme_says_where_the_comparison_over_many_worlds_is() -> None:
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "The gate delivers more." not in readme, "a claim about 20 worlds read as one about the run at hand"
    assert "for the run at hand, which arm delivered more" in readme


# ---- 6. a two-stage run has no run-level α budget to overrun --------------------------------------


def test_6_a_two_stage_run_names_its_design_not_an_alpha_spent(copy_of) -> None:  # noqa: F811
    words = error_words(_summary())
    assert "α_search=0.4" in words and "spent" not in words
    assert "2.0000" not in words
    assert invoke("report", RUN, "--out", "rep").exit_code == 0
    md = (copy_of / "rep" / "report.md").read_text()
    assert "spent of α\\_run" not in md and "spent of α_run" not in md
    assert load_contract(copy_of / "program.md").contract.promotion.error_design == "two_stage"
    compared = invoke("compare", RUN, RUN)
    assert "spent of" not in compared.output


# ---- 7. promote --arm random refuses before it prints the diff -------------------------------------


def test_7_promote_of_the_random_arm_is_refused_before_its_diff(copy_of) -> None:  # noqa: F811
    result = invoke("promote", RUN, "--arm", "random")
    assert result.exit_code == 2
    assert "@@" not in result.output and "+++ " not in result.output, "the diff printed before the refusal"
    assert "negative control" in result.output and "--force" in result.output
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "the random arm's" in readme and "before it shows the diff" in readme


# ---- 8. replicate: one estimate of the rounds, words that read once, prefixes, the budget --------


def _rc(**promotion: object) -> SimpleNamespace:
    p = load_contract(REPO / "program.md").contract.promotion.model_copy(update=promotion)
    return SimpleNamespace(promotion=p)


def _rounds(*target: float) -> list[RoundStat]:
    return [RoundStat(diff={TARGET: x, "concerning": 0.0}, n_seeds={TARGET: 4}, se={}) for x in target]


def test_8_replication_words_read_once() -> None:
    from sil.run.replication import judge_replication, margin_words

    keep = SimpleNamespace(mutation_id="m1", arm="gate")
    holds = judge_replication(_rc(), keep, _rounds(-1.0, -1.2, -0.9, -1.1))  # type: ignore[arg-type]
    assert holds.conclusive and not holds.reason.startswith("holds")
    assert margin_words(0.0) == "0 (no change)" and "-0.00" not in margin_words(0.0)
    unsure = judge_replication(_rc(), keep, _rounds(-3.5, 1.85), _rounds(-0.5, -0.6, -0.4))  # type: ignore[arg-type]
    assert "-0.00" not in unsure.reason and "spans 0 (no change)" in unsure.reason
    assert f"about {unsure.rounds_needed} rounds in all would decide" in unsure.reason


def test_8_replicate_takes_a_unique_prefix_and_says_what_it_spends(copy_of) -> None:  # noqa: F811
    verdicts = [json.loads(x)["payload"] for x in (copy_of / "state/runs" / RUN / "ledger.jsonl").open()]
    keep = next(v for v in verdicts if v.get("verdict") == "keep")
    result = invoke("replicate", RUN, keep["mutation_id"][:6], "--arm", keep["arm"], "--k", "2")
    # the tiny run has spent its audits: the prefix found the KEEP, and the budget refuses the rounds
    left = re.search(r"replication: 4 audits from the run's budget \((\d+) of it left\)", result.output)
    assert left is not None and int(left.group(1)) < 4, result.output
    assert result.exit_code == 2 and "2 fresh rounds cannot start: run budget" in result.output
    unknown = invoke("replicate", RUN, "zzzzzz", "--k", "2")
    assert unknown.exit_code == 2 and "no verdict for mutation 'zzzzzz'" in unknown.output
    assert "holds: holds" not in result.output


def test_8_replicate_defaults_to_the_contract_s_replicate_k(copy_of, monkeypatch) -> None:  # noqa: F811
    import sil.cli.commands as commands

    seen: list[int] = []
    monkeypatch.setattr(commands, "replicate_keep", lambda *a, **kw: seen.append(a[5]) or 0)
    assert invoke("replicate", RUN, "abcd").exit_code == 0
    assert seen == [load_contract(copy_of / "program.md").contract.promotion.replicate_k]


# ---- 9. one noise figure, said what it pools; one meaning of Δ per place --------------------------


def test_9_the_noise_line_says_what_it_pools_and_shows_the_aa_figure() -> None:
    line = noise_line(_summary())
    assert "12 never-arm A/A pairs + the rounds of 5 decided candidates" in line
    assert "σ̂=0.76" in line and "the A/A pairs alone: σ̂=1.02" in line
    assert "champion − start" in DIRECTION_LINE and "candidate − champion" in DIRECTION_LINE


# ---- 10. the report: words whole, a viewport, plurals, tables that say what they measure ----------


def test_10_the_report_page_keeps_words_whole_and_reads_on_a_phone(copy_of) -> None:  # noqa: F811
    assert invoke("report", RUN, "--out", "rep").exit_code == 0
    page = (copy_of / "rep" / "report.html").read_text()
    assert "name='viewport'" in page
    assert "overflow-wrap:anywhere" not in page and "class='tw'" in page
    assert ">1 items<" not in page
    md = (copy_of / "rep" / "report.md").read_text()
    assert "&\\#x27;" not in md and "&#x27;" not in md


def test_10_replications_have_their_own_table_and_kept_diffs_read_in_order() -> None:
    from sil.review.render import CERT_HEAD, REPL_HEAD, _kept_order, _kept_title, _replication_rows
    from sil.review.report import KeptDiff

    assert not any("replication" in h for h in CERT_HEAD) and any("parent" in h for h in REPL_HEAD)
    kept = [
        KeptDiff(arm="random", mutation_id="r1", policy_set="b", parent_set="a", diff=""),
        KeptDiff(arm="gate", mutation_id="g1", policy_set="c", parent_set="a", diff=""),
        KeptDiff(arm="gate", mutation_id="g2", policy_set="d", parent_set="c", diff=""),
    ]
    data = SimpleNamespace(kept=kept, replications=[])
    order = _kept_order(data)  # type: ignore[arg-type]
    assert [k.mutation_id for k in order] == ["g1", "g2", "r1"]
    assert _kept_title(data, kept[2]) == "gate KEEP 2 of 2: g2, set c → d"  # type: ignore[arg-type]
    assert _replication_rows(data) == []  # type: ignore[arg-type]


# ---- 11. the terminal: no cut names at 80 or 120 columns, one line per gap, an honest bar ---------


@pytest.mark.parametrize("width", [80, 120, 160])
def test_11_no_dimension_name_is_cut_at_any_width(width: int) -> None:
    buf = StringIO()
    render(_summary(), Console(file=buf, width=width, color_system=None))
    text = buf.getvalue()
    assert "…" not in text, text
    assert "input_hallucination" in text and "certified against the start" in text


def test_11_the_use_line_says_what_not_provable_means() -> None:
    buf = StringIO()
    render(_summary(use={"not_provable": 502}), Console(file=buf, width=200, color_system=None))
    assert "cannot show whether that surface's text reached the target" in " ".join(buf.getvalue().split())


def test_11_a_complete_run_takes_the_bar_down_before_it_says_so(copy_of) -> None:  # noqa: F811
    from sil.run.train import execute_run

    out = Console(file=StringIO(), width=200)
    order: list[str] = []

    class Recording(Console):
        def print(self, *objects: object, **kw: object) -> None:  # type: ignore[override]
            order.append(str(objects[0]) if objects else "")

    loaded = load_contract(copy_of / "program.md")
    code = execute_run(loaded, copy_of, RUN, None, Recording(), out, before_summary=lambda: order.append("BAR DOWN"))
    assert code == 0
    assert order.index("BAR DOWN") < next(i for i, x in enumerate(order) if "already complete" in x)


def test_11_the_bar_shows_its_total_as_an_upper_bound() -> None:
    import inspect

    from sil.cli import progress

    assert "≤{task.total" in inspect.getsource(progress) and "of at most" in inspect.getsource(progress)


# ---- 12. CLI conventions ------------------------------------------------------------------------------


def test_12_dash_h_works_everywhere() -> None:
    for args in (["-h"], ["run", "-h"], ["ledger", "-h"], ["ledger", "verify", "-h"], ["runs", "-h"], ["status", "-h"]):
        result = invoke(*args)
        assert result.exit_code == 0 and "Usage" in result.output, args


def test_12_the_help_s_exit_codes_match_a_failed_check(copy_of) -> None:  # noqa: F811
    assert "`sil check` exits 2" in invoke("--help").output
    Path("bad.md").write_text("hello\n")
    result = invoke("check", "--contract", "bad.md")
    assert result.exit_code == 2
    assert "bad.md must start with a '---' line" in result.output and "program.md must" not in result.output


def test_12_json_on_report_replicate_promote_sweep() -> None:
    for command in ("report", "replicate", "promote", "sweep", "runs", "status", "check"):
        assert "--json" in invoke(command, "--help").output, command


def test_12_report_json_prints_the_files(copy_of) -> None:  # noqa: F811
    result = invoke("report", RUN, "--out", "rep", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert Path(data["files"]["html"]).exists() and data["conclusion"].startswith("conclusion:")


def test_12_review_commands_outside_a_project_say_so(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for command in (["runs"], ["status"], ["report"], ["ledger", "verify"], ["export", "--format", "csv"]):
        result = invoke(*command)
        assert result.exit_code == 2 and "not in a SIL project" in result.output, command
        assert "write its contract to program.md, then `sil run`" in result.output, command


def test_12_run_help_does_not_ask_for_the_project_root() -> None:
    assert "from the project root" not in invoke("run", "--help").output


def test_12_a_misspelt_backend_is_named_as_such(tmp_path, monkeypatch) -> None:
    text = (REPO / "program.md").read_text().replace("\nbackend: sim ", "\nbackend: simm ", 1)
    (tmp_path / "c.md").write_text(text)
    monkeypatch.chdir(REPO)
    result = invoke("check", "--contract", str(tmp_path / "c.md"))
    assert result.exit_code == 2
    assert "simm" in result.output and "only for backend" not in result.output


def test_12_quiet_and_verbose_are_global_options() -> None:
    for flag in ("-q", "-v", "--quiet", "--verbose"):
        assert flag in invoke("--help").output, flag
    assert invoke("-q", "-v", "runs").exit_code == 2
