"""Contract fields of the petri backend: prices for paid models, the petri section."""

from __future__ import annotations

import pytest

from sil.contract.petriparams import PetriParams
from sil.contract.schema import ContractError, parse_contract
from tests.petri_support import OFFLINE_CONTRACT

TEXT = OFFLINE_CONTRACT.read_text()


def test_offline_example_contract_is_offline_with_petri_defaults() -> None:
    c = parse_contract(TEXT).contract
    assert c.backend == "petri" and c.offline
    petri = c.settings(PetriParams)
    assert petri.target_agent == "sil_runtime/runtime_target" and petri.target_tools == "fixed"
    assert petri.realism_filter is False


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        (
            "target: {model: scripted/target}",
            "target: {model: anthropic/claude-x, credential_env: ANTHROPIC_API_KEY}",
            "models ['target'] call paid models but have no price",
        ),
        ("  concurrency: 2", "  concurrency: 2\n  judge_resamples: 11", "judge_resamples"),
        ("backend: petri", "backend: sim\nsim: {intercepts: {}}", "'petri' section is only for backend 'petri'"),
        ("  target_tools: fixed ", "  target_tools: invented ", "petri.target_tools"),
        ("  sample_token_limit: 200000", "  sample_token_limit: 10", "petri.sample_token_limit"),
    ],
)
def test_invalid_petri_contracts_name_the_problem(old: str, new: str, fragment: str) -> None:
    assert old in TEXT
    with pytest.raises(ContractError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        parse_contract(TEXT.replace(old, new, 1))


def test_a_priced_paid_model_is_accepted_and_not_offline() -> None:
    text = TEXT.replace(
        "target: {model: scripted/target}",
        "target: {model: anthropic/claude-x, price: {input_per_mtok: 3, output_per_mtok: 15}, context_tokens: 200000}",
    )
    c = parse_contract(text).contract
    assert not c.offline and c.models.target.price.output_per_mtok == 15
