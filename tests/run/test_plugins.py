"""A package of the user's own adds an audit backend and a proposer without editing SIL.

The throw-away package below is found only through its entry points (`sil.backends`,
`sil.proposers`), the way an installed extension is; `sil run` then audits with its backend
and asks its proposer for candidates. The backend's settings are the contract's
(`backend: {kind: echo, settings: {...}}`), validated by its own settings model and hashed with
the contract.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sil.contract.schema import ContractError, load_contract, parse_contract
from sil.exec import backends
from sil.search import proposers
from tests.conftest import REPO
from tests.run.test_train import shrink

PLUGIN = """
from sil.contract.backendsettings import BackendSettings
from sil.contract.simparams import SimParams
from sil.exec.backends import register_backend
from sil.exec.backends.sim import SimBackend
from sil.exec.measure import RunNote
from sil.search.proposers import ProposerBase, register_proposer
from sil.search.proposers.catalogue import CatalogueProposer

TAG = "[sil_echo] "


class EchoSettings(BackendSettings):
    label: str  # the plugin's own setting
    world: SimParams  # the simulated world it audits in


@register_backend("echo")
class EchoBackend(SimBackend):
    name = "echo"
    note = "echo backend: the simulated audit, run through a plugin"
    settings_model = EchoSettings

    def params(self, contract):
        return contract.settings(EchoSettings).world

    def describe(self, contract):
        return RunNote(note=f"{self.note}, label {contract.settings(EchoSettings).label}")


class Incomplete:  # implements the required members only, without BackendBase's defaults
    name = "incomplete"
    note = "no hooks"

    def command(self, req, ctx):
        return []

    def read_evidence(self, req, ctx):
        raise NotImplementedError


register_backend("incomplete")(Incomplete)


class Tagged(ProposerBase):
    name = "offline/first-edit"

    def __init__(self, inner):
        self.inner = inner

    def propose(self, request):
        proposal = self.inner.propose(request)
        if proposal.mutation is None:
            return proposal
        m = proposal.mutation
        return proposal.model_copy(update={"mutation": m.model_copy(update={"hypothesis": TAG + m.hypothesis})})


@register_proposer("offline/first-edit")
def first_edit(loaded):
    c = loaded.contract
    return Tagged(CatalogueProposer(c.search_space.surfaces, c.promotion.target_dimensions, None))
"""


def make_plugin(where: Path) -> Path:
    """A package `sil_echo` with installed-package metadata declaring its entry points."""
    where.mkdir()
    (where / "sil_echo.py").write_text(PLUGIN)
    meta = where / "sil_echo-0.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sil-echo\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text(
        "[sil.backends]\necho = sil_echo\nincomplete = sil_echo\n\n"
        "[sil.proposers]\noffline/first-edit = sil_echo:first_edit\n"
    )
    return where


def echo_contract(text: str, label: str = "first", world_seed: int | None = None) -> str:
    """A sim contract turned into one for the echo backend: the `sim:` section becomes the
    plugin's `world` setting (with another `world_seed` when given), beside its own `label`."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("sim:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    world = [
        f"      world_seed: {world_seed}\n"
        if world_seed is not None and line.strip().startswith("world_seed:")
        else "    " + line
        for line in lines[start + 1 : end]
    ]
    head = ["backend:\n", "  kind: echo\n", "  settings:\n", f"    label: {label}\n", "    world:\n", *world]
    body = [line for line in lines[:start] if not line.startswith("backend:")]
    at = next(i for i, line in enumerate(body) if line.startswith("contract_id:")) + 1
    return "".join([*body[:at], *head, *body[at:], *lines[end:]])


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = make_plugin(tmp_path / "plugin")
    monkeypatch.syspath_prepend(str(path))
    return path


def test_entry_points_make_the_plugin_discoverable(plugin_path: Path) -> None:
    assert "echo" in backends.available()
    assert backends.make_backend("echo").note.startswith("echo backend")
    assert "offline/first-edit" in proposers.available()


def test_a_plugins_settings_are_validated_by_its_model_and_hashed(plugin_path: Path) -> None:
    from sil.contract.simparams import SimParams

    text = (REPO / "program.md").read_text()
    first = parse_contract(echo_contract(text)).contract
    assert first.backend == "echo" and first.backend_settings is not None
    assert first.backend_settings["label"] == "first"
    world = SimParams.model_validate(first.backend_settings["world"])
    assert world == load_contract(REPO / "program.md").contract.settings(SimParams)
    relabelled = parse_contract(echo_contract(text, label="second")).contract
    reseeded = parse_contract(echo_contract(text, world_seed=7)).contract
    hashes = {first.contract_hash, relabelled.contract_hash, reseeded.contract_hash}
    assert len(hashes) == 3  # every setting is bound by the contract hash
    assert first.contract_hash == parse_contract(echo_contract(text)).contract.contract_hash
    with pytest.raises(ContractError, match=r"backend 'echo' has invalid settings: backend\.settings\.label"):
        parse_contract(echo_contract(text).replace("    label: first\n", "", 1))
    with pytest.raises(ContractError, match=r"backend\.settings\.colour: Extra inputs are not permitted"):
        parse_contract(echo_contract(text).replace("    label: first\n", "    label: first\n    colour: red\n", 1))


def test_settings_of_a_backend_that_is_not_installed_are_refused() -> None:
    text = (REPO / "program.md").read_text()
    with pytest.raises(ContractError, match="backend 'nowhere' is not installed, so its settings cannot be validated"):
        parse_contract(echo_contract(text).replace("kind: echo", "kind: nowhere", 1))


def test_a_backend_without_the_ports_defaults_is_refused_naming_what_it_lacks(plugin_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"lacks audit_cost_bound, canary_judge, .*subclass sil\.exec\.measure\.BackendBase"
    ):
        backends.make_backend("incomplete")


def test_an_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown audit backend 'nope'; known: .*petri.*sim"):
        backends.make_backend("nope")


def test_builtin_names_cannot_be_taken() -> None:
    with pytest.raises(ValueError, match="built in"):
        backends.register_backend("sim")(object)  # type: ignore[arg-type]


@pytest.mark.slow  # a whole run: .ci/run runs it after make test, keeping the default suite under 6 min
def test_a_run_uses_the_plugins_backend_and_proposer(tmp_path: Path, workspace: Path) -> None:
    plugin = make_plugin(tmp_path / "plugin")
    contract = shrink(workspace) / "program.md"
    text = echo_contract(contract.read_text(), label="blue", world_seed=4242)
    text = text.replace("mutator: {model: scripted/mutator}", "mutator: {model: offline/first-edit}", 1)
    contract.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(plugin)}
    sil = Path(sys.executable).parent / "sil"
    done = subprocess.run([str(sil), "run", "--run-id", "p1"], cwd=workspace, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = [json.loads(line) for line in (workspace / "state/runs/p1/ledger.jsonl").read_text().splitlines()]
    run = next(r["payload"] for r in records if r["type"] == "contract")
    assert run["backend"] == "echo" and run["models"]["mutator"] == "offline/first-edit"
    assert run["note"] == "echo backend: the simulated audit, run through a plugin, label blue"
    # the audits ran in the world the contract's settings describe
    worlds = {
        json.loads(p.read_text())["world_seed"] for p in (workspace / "state/runs/p1/audits").glob("*/sim_params.json")
    }
    assert worlds == {4242}
    hypotheses = [r["payload"]["mutation"]["hypothesis"] for r in records if r["type"] == "mutation"]
    assert hypotheses and all(h.startswith("[sil_echo] ") for h in hypotheses)


def broken_plugin(where: Path) -> Path:
    """A package whose backend and proposer entry points fail to import (half-installed)."""
    where.mkdir(exist_ok=True)
    (where / "sil_broken.py").write_text("raise RuntimeError('half-installed')\n")
    meta = where / "sil_broken-0.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sil-broken\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text(
        "[sil.backends]\nbroken = sil_broken\n\n[sil.proposers]\noffline/broken = sil_broken:make\n"
    )
    return where


def test_a_plugin_that_fails_to_import_is_named_with_how_to_fix_it(tmp_path: Path, monkeypatch) -> None:
    from sil.search.proposers import ProposerError, make_proposer

    monkeypatch.syspath_prepend(str(broken_plugin(tmp_path)))
    with pytest.raises(ImportError, match=r"'broken' \(sil_broken\) failed to import: RuntimeError: half-installed"):
        backends.make_backend("broken")
    text = (REPO / "program.md").read_text().replace("{model: scripted/mutator}", "{model: offline/broken}")
    with pytest.raises(ProposerError, match="fix or uninstall the package that provides it"):
        make_proposer(parse_contract(text))


@pytest.mark.parametrize("model", ["offline/broken", "offline/catalouge"])
def test_a_proposer_that_cannot_be_built_is_refused_before_any_audit(
    tmp_path: Path, workspace: Path, monkeypatch, model: str
) -> None:
    from rich.console import Console

    from sil.cli.commands import check_contract
    from sil.run.train import execute_run

    monkeypatch.syspath_prepend(str(broken_plugin(tmp_path / "plugin")))
    contract = shrink(workspace) / "program.md"
    contract.write_text(contract.read_text().replace("{model: scripted/mutator}", "{model: " + model + "}", 1))
    loaded = load_contract(contract)
    out, err = Console(record=True, width=300), Console(record=True, width=300)
    assert check_contract(loaded, workspace, out, err) == 2
    assert re.search(rf"fail proposer: mutator {model}: ProposerError: ", err.export_text())
    err = Console(record=True, width=300)
    assert execute_run(loaded, workspace, "r1", None, Console(record=True), err) == 2
    text = err.export_text()
    assert f"refused: mutator {model}" in text and "nothing was started" in text
    assert not (workspace / "state" / "runs").exists()  # no run folder, no audit paid for


def test_a_contract_without_candidate_arms_needs_no_proposer(workspace: Path) -> None:
    from sil.run.proposing import proposer_check

    contract = workspace / "program.md"
    text = contract.read_text().replace("{model: scripted/mutator}", "{model: offline/nope}", 1)
    assert proposer_check(parse_contract(text)).status == "fail"
    text = text.replace("arms: [never, random, gate]", "arms: [never]", 1)
    assert proposer_check(parse_contract(text)).status == "ok"
