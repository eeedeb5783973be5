"""The USD budget holds against the call that crosses Petri's token limit (issue 40.3).

inspect checks a sample's token limit after each model call, so the call that crosses it is
paid in full. A target reading 250,000 tokens in one call against `sample_token_limit:
200000` at $15/$15 per Mtok was admitted at a $3.00 worst case under `max_usd: 3.5` and
charged $3.765. Now a paid role names the most tokens one call can read (`context_tokens`),
the bound adds that call, and the preflight is refused before it can overrun.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sil.cli.app import app
from sil.contract.schema import ContractError, load_contract
from sil.exec.backends.petri import worst_case_cost
from sil.store.runstate import RunState
from tests.petri_support import OFFLINE_CONTRACT, REPO

runner = CliRunner()
OFFLINE_TARGET = "  target: {model: scripted/target}"
LONG_READER = "  target: {model: scripted/target-longread, price: {input_per_mtok: 15, output_per_mtok: 15}"
BOUNDED = ", context_tokens: 300000, max_tokens: 1000}"


def project(root: Path, max_usd: float, target: str = LONG_READER + BOUNDED) -> Path:
    """The offline Petri project whose target reads 250k tokens per call, at $15/$15 per Mtok."""
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    text = OFFLINE_CONTRACT.read_text()
    assert OFFLINE_TARGET in text and "  max_usd: 0\n" in text and "sample_token_limit: 200000" in text
    text = text.replace(OFFLINE_TARGET, target).replace("  max_usd: 0\n", f"  max_usd: {max_usd}\n")
    (root / "program.md").write_text(text)
    return root


def run(root: Path, monkeypatch) -> tuple[int, str, RunState, list[dict]]:
    monkeypatch.chdir(root)
    result = runner.invoke(app, ["run", "--run-id", "p1"], catch_exceptions=False)
    run_dir = root / "state" / "runs" / "p1"
    state = RunState.load(run_dir)
    assert state is not None, result.output
    records = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    return result.exit_code, result.output, state, records


def test_the_long_context_preflight_is_refused_within_max_usd(tmp_path: Path, monkeypatch) -> None:
    """The reproduction: today it was admitted at $3.00 and charged $3.765 against max_usd 3.5."""
    code, output, state, records = run(project(tmp_path, max_usd=3.5), monkeypatch)
    assert code == 3, output
    assert "wiring preflight not run: USD budget ($3.5) could be exceeded" in " ".join(output.split())
    assert state.usd == 0 and state.audits == 0
    assert not [r for r in records if r["type"] == "probe"]


@pytest.mark.slow
def test_the_bound_covers_what_the_long_read_is_charged(tmp_path: Path, monkeypatch) -> None:
    """With room for one preflight attempt, the call that crosses the limit is charged, and the
    charge stays within the bound the attempt was admitted at, and within max_usd."""
    root = project(tmp_path, max_usd=10)
    bound = worst_case_cost(load_contract(root / "program.md").contract, n_seeds=1, audits=1)
    code, output, state, records = run(root, monkeypatch)
    [probe] = [r["payload"] for r in records if r["type"] == "probe"]
    charged = probe["usage"]["usd"]
    assert 3.5 < charged <= bound  # more than the old $3.00 bound admitted; what the new one allows
    assert "hit the token limit" in probe["audit_gap_reason"]
    assert state.usd == pytest.approx(charged) and state.usd <= 10
    assert code == 3 and "wiring preflight not run: USD budget ($10) could be exceeded" in " ".join(output.split())


def test_a_paid_petri_role_without_context_tokens_is_refused_naming_the_field(tmp_path: Path) -> None:
    root = project(tmp_path, max_usd=3.5, target=LONG_READER + "}")
    with pytest.raises(ContractError, match=r"models \['target'\] are paid but have no context_tokens"):
        load_contract(root / "program.md")


def test_the_worst_case_adds_the_largest_call_of_a_paid_solver_role(tmp_path: Path) -> None:
    contract = load_contract(project(tmp_path, max_usd=3.5) / "program.md").contract
    limit_usd = 200_000 * 15 / 1e6  # the old bound: the token limit alone
    crossing_usd = (300_000 + 1000) * 15 / 1e6  # its whole context read, plus its longest answer
    assert worst_case_cost(contract, n_seeds=1, audits=1) == pytest.approx(limit_usd + crossing_usd)
    assert worst_case_cost(contract, n_seeds=4, audits=2) == pytest.approx(8 * (limit_usd + crossing_usd))
