"""`sil check` resolves Petri's target agent as the audit will, and says how to fix a bad name."""

from __future__ import annotations

import pytest

from sil.contract.petriparams import PetriParams
from sil.contract.schema import Contract, load_contract
from sil.exec.backends import make_backend
from sil.exec.backends.petri_agent import AgentLookup, explain, resolve_target_agent
from sil.exec.startchecks import _backend_checks
from tests.petri_support import OFFLINE_CONTRACT


def with_agent(name: str, params: dict[str, str] | None = None) -> Contract:
    contract = load_contract(OFFLINE_CONTRACT).contract
    settings = contract.settings(PetriParams).model_copy(
        update={"target_agent": name, "target_agent_params": params or {}}
    )
    return contract.with_settings(settings)


def test_a_name_given_with_its_package_prefix_is_explained_with_the_fix() -> None:
    seen = AgentLookup(found=False, similar=["mini_runtime/mini_runtime/mini_target"], entry_points=["mini_runtime"])
    why = explain("mini_runtime/mini_target", seen)
    assert "registered it as mini_runtime/mini_runtime/mini_target" in why
    assert '@agent(name="mini_target")' in why


def test_a_missing_entry_point_and_refused_params_are_explained() -> None:
    why = explain("mypackage/my_target", AgentLookup(found=False, entry_points=["sil_runtime"]))
    assert "no installed package offers the inspect_ai entry point 'mypackage'" in why and "pip install" in why
    bad = explain("mypackage/my_target", AgentLookup(found=True, bad_params="got an unexpected keyword 'x'"))
    assert "target_agent_params" in bad and "unexpected keyword" in bad


@pytest.mark.slow  # a whole run or real audits: .ci/run runs it after make test
def test_the_petri_backend_resolves_its_target_agent_in_the_audits_environment() -> None:
    assert make_backend("sim").start_checks(with_agent("sil_runtime/runtime_target")) == []  # the default
    (ok,) = _backend_checks(with_agent("sil_runtime/runtime_target"))
    assert ok.status == "ok" and ok.name == "target_agent", ok.detail
    missing = resolve_target_agent(with_agent("sil_nosuchpackage/agent"))
    assert missing.status == "fail" and "entry point 'sil_nosuchpackage'" in missing.detail, missing.detail
    refused = resolve_target_agent(with_agent("sil_runtime/runtime_target", {"no_such_param": "1"}))
    assert refused.status == "fail" and "no_such_param" in refused.detail, refused.detail
