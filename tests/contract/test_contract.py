"""Contract parsing: strict YAML, clear field errors, canonical hash that any change moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from sil.contract.schema import ContractError, load_contract, parse_contract
from tests.conftest import REPO

TEXT = (REPO / "program.md").read_text()


def test_default_contract_parses_and_is_offline() -> None:
    loaded = parse_contract(TEXT)
    assert loaded.contract.backend == "sim"
    assert loaded.contract.offline
    assert "Research programme" in loaded.programme
    assert len(loaded.contract.contract_hash) == 64


def test_hash_ignores_formatting_but_not_values() -> None:
    base = parse_contract(TEXT).contract.contract_hash
    reformatted = TEXT.replace("max_turns: 12", "max_turns:    12   # same value")
    assert parse_contract(reformatted).contract.contract_hash == base
    changed = TEXT.replace("max_turns: 12", "max_turns: 13")
    assert parse_contract(changed).contract.contract_hash != base
    # The programme is what the mutator reads: changing it changes the run, so the hash.
    prose_only = TEXT.replace("# Research programme", "# Research programme (v2)")
    assert parse_contract(prose_only).contract.contract_hash != base
    trailing_space = TEXT.rstrip("\n") + "\n\n\n"
    assert parse_contract(trailing_space).contract.contract_hash == base


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ("max_turns: 12", "max_turns: 12\n  max_turns: 14", "duplicate key 'max_turns'"),
        ("max_turns: 12", "max_turns: 12\n  temperature: 0.3", "measurement.temperature: Extra inputs"),
        (  # a mistyped key names the field it most likely meant, at its own level
            "max_turns: 12",
            "max_tunrs: 12",
            "measurement.max_tunrs: Extra inputs are not permitted (did you mean 'max_turns'?)",
        ),
        (
            "error_control: fwer",
            "eror_control: fwer",
            "promotion.eror_control: Extra inputs are not permitted (did you mean 'error_control'?)",
        ),
        (
            "{model: sim/judge}",
            "{model: sim/judge, max_tokns: 9}",
            "models.judge.max_tokns: Extra inputs are not permitted (did you mean 'max_tokens'?)",
        ),
        ("max_turns: 12", "max_turns: -1", "measurement.max_turns"),
        ("backend: sim", "backend: openai", "backend"),
        ("error_control: fwer", "error_control: fwer\n  alpha_recycle: sometimes", "promotion.alpha_recycle"),
        ("[broken_tool_use]", "[broken_tool_use, concerning]", "both target_dimensions and critical_dimensions"),
        ("surfaces: [wrapper_prompt,", "surfaces: [model_choice, wrapper_prompt,", "unknown surfaces"),
        ("arms: [never, random, gate]", "arms: [random, gate]", "needs the never arm"),
        (
            "contract_id: sil-default-sim",
            "contract_id: sil-default-sim\nparent: " + "a" * 64,
            "parent and revision_reason",
        ),
        (
            "arm_audits: {never: 24, random: 20, gate: 130}",
            "arm_audits: {never: 24, random: 30, gate: 9999}",
            "more than max_audits",
        ),
        (  # the random arm's certification counts too, and the message says how to make room
            "max_audits: 500",
            "max_audits: 400",
            "add up to 454, more than max_audits 400: raise max_audits to 454, or lower arm_audits or "
            "certify_rounds; or certify_random: false",
        ),
    ],
)
def test_invalid_contracts_name_the_field(old: str, new: str, fragment: str) -> None:
    assert old in TEXT
    with pytest.raises(ContractError) as info:
        parse_contract(TEXT.replace(old, new, 1))
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "text", ["no front matter", "---\nkey: [unclosed\n---\n", "---\n- a list\n---\n", "---\nx: 1\n"]
)
def test_malformed_documents_are_rejected(text: str) -> None:
    with pytest.raises(ContractError):
        parse_contract(text)


def test_unsafe_yaml_tags_are_refused() -> None:
    evil = TEXT.replace("contract_id: sil-default-sim", "contract_id: !!python/object/apply:os.system ['true']")
    with pytest.raises(ContractError):
        parse_contract(evil)


def test_missing_file_is_a_clear_error_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="no contract at .*nope.md: pass --contract FILE, or write one there"):
        load_contract(tmp_path / "nope.md")
    with pytest.raises(ContractError, match="cannot read contract"):  # a folder, not a file
        load_contract(tmp_path)


def test_a_key_like_no_field_gets_no_guess() -> None:
    with pytest.raises(ContractError) as info:
        parse_contract(TEXT.replace("max_turns: 12", "max_turns: 12\n  zzzqqq: 1", 1))
    assert "measurement.zzzqqq: Extra inputs are not permitted\n" in str(info.value) + "\n"
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize(
    "value, says",
    [
        ("1", "screen_reference: 1 would compare each candidate with a single champion audit; give 0"),
        ("-1", "greater than or equal to 0"),
        ("65", "less than or equal to 64"),
    ],
)
def test_a_screen_reference_that_cannot_screen_is_refused(value: str, says: str) -> None:
    assert "  screen_reference: 8" in TEXT
    with pytest.raises(ContractError, match=says):
        parse_contract(TEXT.replace("  screen_reference: 8", f"  screen_reference: {value}", 1))


def test_a_mistyped_screen_reference_is_named() -> None:
    with pytest.raises(ContractError, match=r"did you mean 'screen_reference'"):
        parse_contract(TEXT.replace("  screen_reference: 8", "  screen_referense: 8", 1))
