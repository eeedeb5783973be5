"""`python -m bench.project` refuses arguments that would measure nothing, before any run."""

from __future__ import annotations

import json

import pytest

from bench import project


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--runs", "0"], "at least 1"),
        (["--revisions", "0"], "at least 1"),
        (["--project-alpha", "1.5"], "between 0 and 1"),
        (["--designs", "none:heldot"], "unknown design(s) none:heldot"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(argv: list[str], says: str, capsys, tmp_path) -> None:
    with pytest.raises(SystemExit) as ex:
        project.parse_args([*argv, "--out", str(tmp_path / "out")])
    assert ex.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_default_designs_are_accepted() -> None:
    assert project.parse_args([]).runs == 300


def _fake_project(task: tuple[str, str, int, int, dict]) -> list[dict]:
    """A project whose every run delivers, worse on fresh seeds in odd-numbered projects."""
    _, _, index, revisions, _ = task
    run = {"delivered": True, "refused": False, "worse_fresh": index % 2 == 1, "worse_heldout": False}
    return [{**run, "target_fresh": -0.1 * index} for _ in range(revisions)]


def test_resume_keeps_the_earlier_projects_and_measures_on(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(project, "one_project", _fake_project)
    out = ["--out", str(tmp_path), "--revisions", "2", "--designs", "none:heldout,project:fresh"]
    project.main(["--runs", "2", *out])
    rows = project.main(["--runs", "4", "--resume", *out])
    data = json.loads((tmp_path / "project.json").read_text())
    assert [len(ps) for ps in data["projects"].values()] == [4, 4]
    # projects 0..3, the odd ones worse: the resumed measurement did not redo 0 and 1 as 2 and 3
    assert [p[0]["target_fresh"] for p in data["projects"]["none:heldout"]] == [0.0, -0.1, -0.2, -0.30000000000000004]
    assert rows[0]["p_any_worse_fresh_seeds"] == 0.5 and rows[0]["runs"] == 4
    assert len(data["segments"]) == 2 and "projects 3 to 4" in data["segments"][1]
    assert "## Segments" in (tmp_path / "project.md").read_text()


def test_resume_refuses_other_settings_and_a_missing_measurement(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(project, "one_project", _fake_project)
    with pytest.raises(SystemExit, match="nothing to resume"):
        project.main(["--runs", "1", "--resume", "--out", str(tmp_path)])
    project.main(["--runs", "1", "--revisions", "2", "--designs", "none:heldout", "--out", str(tmp_path)])
    before = (tmp_path / "project.json").read_text()
    with pytest.raises(SystemExit, match=r"--revisions 2 \(now 3\)"):
        project.main(
            ["--runs", "2", "--revisions", "3", "--designs", "none:heldout", "--resume", "--out", str(tmp_path)]
        )
    assert (tmp_path / "project.json").read_text() == before


def test_resume_refuses_a_measurement_of_another_contract(tmp_path, monkeypatch) -> None:
    """A contract edited between segments (say a new promotion default) would mix two designs."""
    monkeypatch.setattr(project, "one_project", _fake_project)
    out = ["--revisions", "2", "--designs", "none:heldout", "--out", str(tmp_path)]
    project.main(["--runs", "1", *out])
    path = tmp_path / "project.json"
    data = json.loads(path.read_text())
    assert data["settings"]["contract_hash"] == project.contract_hash()
    project.main(["--runs", "2", "--resume", *out])  # the same contract resumes
    data["settings"]["contract_hash"] = "0" * 64
    path.write_text(json.dumps(data))
    with pytest.raises(SystemExit, match="was measured with contract 000000000000"):
        project.main(["--runs", "3", "--resume", *out])
    del data["settings"]["contract_hash"]
    path.write_text(json.dumps(data))
    with pytest.raises(SystemExit, match="records no contract hash"):
        project.main(["--runs", "3", "--resume", *out])


def test_the_bounds_are_clopper_pearson_upper_limits() -> None:
    assert project.upper_95(0, 59) == pytest.approx(0.0495, abs=1e-3)  # about 3 / n: the rule of three
    assert project.upper_95(0, 300) == pytest.approx(0.00994, abs=1e-4)
    assert project.upper_95(3, 20) == pytest.approx(0.3437, abs=1e-3)  # P(X <= 3 | 20, 0.3437) = 0.05
    assert project.upper_95(5, 5) == 1.0


def test_the_stress_world_is_a_permissive_search_on_small_seed_specific_effects() -> None:
    from sil.contract.schema import load_contract
    from sil.contract.simparams import SimParams

    args = project.parse_args(["--world", "stress"])
    loaded = project.design_contract(load_contract(project.CONTRACT), "project", "fresh", args)
    c = loaded.contract
    sim = c.settings(SimParams)
    assert (sim.landscape, sim.effect_heterogeneity, sim.effect_mixture.help_target) == ("hashed", 1.0, (0.1, 0.5))
    assert sim.effect_mixture.null == 0.45, "the mixture's other fields stay the contract's"
    assert (c.promotion.alpha_search, c.promotion.screen_sd) == (0.45, 0.0)
    assert c.certification.claim == "fresh" and c.certification.project_alpha == 0.05
    mech = project.design_contract(load_contract(project.CONTRACT), "none", "heldout", project.parse_args([]))
    assert mech.contract.promotion == load_contract(project.CONTRACT).contract.promotion


def test_each_revision_audits_the_same_world_afresh() -> None:
    from sil.contract.schema import load_contract
    from sil.contract.simparams import SimParams

    base = project.design_contract(load_contract(project.CONTRACT), "none", "heldout", project.parse_args([]))
    sims = [project.revision(base, i).contract.settings(SimParams) for i in range(3)]
    assert sims[0].noise_seed is None and len({s.audit_seed for s in sims}) == 3
    assert len({s.world_seed for s in sims}) == 1 and len({s.landscape_seed for s in sims}) == 1
    assert len({project.revision(base, i).contract.seed for i in range(3)}) == 3


def test_a_halted_run_delivers_nothing_and_the_project_goes_on(monkeypatch) -> None:
    from sil.run.train import run_phases

    calls: list[int] = []

    def halt_the_first(rc, phases):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:  # the first run's runtime crashed in every audit, say
            rc.state.phase, rc.state.halt_reason = "halted", "3 consecutive audit gaps"
            return rc.state
        return run_phases(rc, phases)

    monkeypatch.setattr(project, "run_phases", halt_the_first)
    opts = vars(project.parse_args(["--gate-audits", "20", "--certify-rounds", "4", "--revisions", "2"]))
    runs = project.one_project(("none", "heldout", 0, 2, opts))
    assert runs[0]["halted"] and not runs[0]["delivered"] and runs[0]["target_fresh"] == 0.0
    assert not runs[1]["halted"] and len(calls) == 2
    (row,) = [r for r in project.rows_of("none", "heldout", [runs], 2) if r["revisions"] == 2]
    assert row["halted_per_project"] == 1.0
