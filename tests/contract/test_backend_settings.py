"""A backend's settings in the contract: old contracts keep their hash, the new form means the same.

`v1/` holds contracts written before backends carried their settings (a `sim:` or `petri:`
section, a plugin backend without settings, run snapshots `contract.json` as the old version
wrote them) and `v1/hashes.json` the hash the old version gave each; the golden ledger
(tests/run/test_default_golden.py) holds program.md's. The plugin side (a plugin's settings
validated by its model and hashed) is tested in tests/run/test_plugins.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sil.contract.petriparams import PetriParams
from sil.contract.schema import Contract, ContractError, load_contract, parse_contract
from sil.contract.simparams import SimParams
from tests.conftest import REPO

V1 = Path(__file__).parent / "v1"
V1_HASHES: dict[str, str] = json.loads((V1 / "hashes.json").read_text())


@pytest.mark.parametrize("name", sorted(V1_HASHES))
def test_a_contract_written_before_keeps_its_hash(name: str) -> None:
    path = V1 / name
    contract = (
        Contract.model_validate_json(path.read_bytes()) if name.endswith(".json") else load_contract(path).contract
    )
    assert contract.contract_hash == V1_HASHES[name]
    again = Contract.model_validate_json(contract.model_dump_json())  # the run's snapshot, read back
    assert again.contract_hash == V1_HASHES[name] and again == contract


def test_the_default_contract_has_the_hash_its_golden_run_recorded() -> None:
    from tests.golden.ledgerdiff import read

    (contract,) = [r for r in read(REPO / "tests" / "golden" / "default-run.jsonl.gz") if r["type"] == "contract"]
    assert load_contract(REPO / "program.md").contract.contract_hash == contract["payload"]["contract_hash"]


def test_the_default_contract_differs_from_its_v1_copy_only_by_its_later_choices() -> None:
    """program.md chose `certify_horizon: search`, `screen_reference: 8` and bench.proposers' world 2
    (its three seeds) after v1; without those lines and with v1's world 0 it is v1's contract."""
    text = (REPO / "program.md").read_text()
    v1_world = {"seed: 20261131": "seed: 20261129", "world_seed: 20261131": "world_seed: 20261129"}
    v1_world["landscape_seed: 9"] = "landscape_seed: 7"
    lines = text.splitlines(keepends=True)
    moved = [i for i, x in enumerate(lines) if x.strip() in v1_world]
    assert len(moved) == 3, "program.md no longer names world 2's three seeds"
    for i in moved:
        lines[i] = lines[i].replace(lines[i].strip(), v1_world[lines[i].strip()])
    text = "".join(lines)
    later = [
        x for x in text.splitlines(keepends=True) if x.lstrip().startswith(("certify_horizon:", "screen_reference:"))
    ]
    contract = load_contract(REPO / "program.md").contract
    assert len(later) == 2 and contract.budget.certify_horizon == "search" and contract.promotion.screen_reference == 8
    for line in later:
        text = text.replace(line, "")
    assert parse_contract(text).contract.contract_hash == V1_HASHES["sim.md"]


def sim_as_kind_and_settings(text: str) -> str:
    """The `backend: sim` + `sim:` contract written as `backend: {kind: sim, settings: ...}`."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("sim:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    settings = ["    " + line for line in lines[start + 1 : end]]
    head = [
        line if not line.startswith("backend:") else "backend:\n  kind: sim\n  settings:\n" for line in lines[:start]
    ]
    at = next(i for i, line in enumerate(head) if line.startswith("backend:")) + 1
    return "".join([*head[:at], *settings, *head[at:], *lines[end:]])


def test_kind_and_settings_mean_the_same_as_a_v1_section() -> None:
    text = (V1 / "sim.md").read_text()
    new = parse_contract(sim_as_kind_and_settings(text)).contract
    old = load_contract(V1 / "sim.md").contract
    assert new.backend == "sim" and new.settings(SimParams) == old.settings(SimParams)
    assert new.contract_hash == old.contract_hash


def test_a_setting_of_a_built_in_backend_changes_the_hash() -> None:
    text = (V1 / "petri.md").read_text()
    base = parse_contract(text).contract
    other = parse_contract(text.replace("sample_token_limit: 200000", "sample_token_limit: 200001", 1)).contract
    assert other.settings(PetriParams).sample_token_limit == 200001
    assert other.contract_hash != base.contract_hash


def test_a_setting_added_later_is_hashed_only_once_it_is_set() -> None:
    """`sim.noise_seed` came after contracts were approved: unset it keeps their hash; set, it is
    part of what was approved (another noise seed audits afresh, so it is another contract)."""
    text = (V1 / "sim.md").read_text()
    base = parse_contract(text).contract
    named = parse_contract(
        text.replace("  world_seed: 20261129", "  world_seed: 20261129\n  noise_seed: 5", 1)
    ).contract
    assert named.settings(SimParams).noise_seed == 5 and named.contract_hash != base.contract_hash
    assert "noise_seed" not in base.canonical_json() and '"noise_seed":5' in named.canonical_json()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda t: re.sub(r"(?m)^sim:.*\n(  .*\n)+", "", t, count=1),
            r"backend 'sim' needs settings .*sim\.intercepts",
        ),
        (lambda t: t.replace("  world_seed: 20261129", "  world_seed: 20261129\n  wolrd: 1", 1), r"sim\.wolrd"),
        (lambda t: t.replace("sim:", "petri:", 1), "the 'petri' section is only for backend 'petri'"),
        (lambda t: t.replace("{model: sim/judge}", "{model: anthropic/j}", 1), r"must be sim/<role>"),
        (
            lambda t: sim_as_kind_and_settings(t).replace("  kind: sim\n", "  kind: sim\n  colour: red\n", 1),
            r"backend must be a name or \{kind: NAME, settings",
        ),
    ],
)
def test_bad_backend_settings_name_what_is_wrong(edit, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        parse_contract(edit((V1 / "sim.md").read_text()))
