"""The contract templates under examples/: `sil check` passes them offline apart from what a user
must supply (the key, the SDK, the approval; their own runtime), and prints the run's cost bound."""

from __future__ import annotations

from sil.contract.petriparams import PetriParams
from sil.contract.schema import load_contract
from sil.exec.startchecks import start_checks
from tests.conftest import REPO

USER_SUPPLIED = ("credential:", "sdk:", "approval", "allowed_signers")


def test_the_cloud_template_passes_check_apart_from_key_sdk_and_approval() -> None:
    loaded = load_contract(REPO / "examples" / "program-anthropic.md")
    contract = loaded.contract
    assert not contract.offline and contract.budget.max_usd > 0
    assert all(getattr(contract.models, r).price is not None for r in ("auditor", "target", "judge", "mutator"))
    report = start_checks(loaded, REPO)
    assert [i.name for i in report.failures if not i.name.startswith(USER_SUPPLIED)] == [], report.failures
    (budget,) = [i for i in report.items if i.name == "budget"]
    assert budget.status == "ok" and "worst case $" in budget.detail, budget  # max_usd covers the bound
    assert {i.name: i.status for i in report.items}["target_agent"] == "ok"


def test_the_offline_template_fails_only_on_the_runtime_the_user_has_not_installed() -> None:
    loaded = load_contract(REPO / "examples" / "program-my-runtime.md")
    assert loaded.contract.offline and loaded.contract.settings(PetriParams).target_agent == "mypackage/my_target"
    report = start_checks(loaded, REPO)
    (failure,) = report.failures
    assert failure.name == "target_agent" and "entry point 'mypackage'" in failure.detail, failure
