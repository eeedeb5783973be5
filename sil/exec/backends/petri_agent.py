"""Whether the contract's Petri target agent resolves, found exactly as the audit will find it.

The audit's `inspect eval` turns `petri.target_agent` into the agent with inspect-ai's registry
lookup (`registry_lookup("agent", name)`: the `inspect_ai` entry point named by the name's
package part is imported on demand, then the name is looked up as registered). `sil check` and
`sil run` make the same lookup before anything is spent: in a subprocess of the audit's
interpreter with the audit's base environment (no PYTHONPATH, a bare HOME), and without
calling the factory (which would load policies). When the name is not found, the report names
what would fix it: the registered agents with the same last part (inspect-ai puts an installed
package's name in front of the name given to `@agent`, so `@agent(name="pkg/x")` registers as
`pkg/pkg/x`), or the missing entry point.

    check = resolve_target_agent(contract)        # a CheckItem: ok, or fail with the fix
    python -m sil.exec.backends.petri_agent NAME '{"mode": "honest"}'   # the subprocess, JSON out
"""

from __future__ import annotations

import functools
import inspect
import json
import subprocess
import sys
import tempfile
from importlib.metadata import entry_points

from pydantic import BaseModel

from sil.contract.petriparams import PetriParams
from sil.contract.schema import Contract
from sil.exec.checkitem import CheckItem
from sil.exec.measure import base_env

ENTRY_POINT_GROUP = "inspect_ai"
LOOKUP_TIMEOUT_S = 120.0
DOC = "docs/runtime-integration.md §2"


class AgentLookup(BaseModel):
    """What the registry lookup in the audit's environment found (the subprocess's answer)."""

    found: bool
    bad_params: str | None = None  # the factory refuses the contract's target_agent_params
    similar: list[str] = []  # registered agents whose name ends like the one asked for
    entry_points: list[str] = []  # names of the installed `inspect_ai` entry points
    entry_point_error: str | None = None  # importing the name's entry point failed


def lookup(name: str, params: dict[str, str]) -> AgentLookup:
    """The audit's lookup of `name`, then (if not found) what is registered instead."""
    from inspect_ai._util.registry import registry_find, registry_info, registry_lookup

    found = registry_lookup("agent", name)
    if callable(found):
        try:
            inspect.signature(found).bind(**params)
        except TypeError as ex:
            return AgentLookup(found=True, bad_params=str(ex))
        return AgentLookup(found=True)
    package, tail = name.split("/")[0], name.split("/")[-1]
    eps = list(entry_points(group=ENTRY_POINT_GROUP))
    error = None
    for ep in eps:
        try:
            ep.load()  # every runtime's registrations, so a misnamed agent shows under its real name
        except Exception as ex:
            if ep.name == package:
                error = f"{type(ex).__name__}: {ex}"
    agents = [registry_info(o).name for o in registry_find(lambda info: info.type == "agent")]
    similar = sorted(n for n in agents if n.split("/")[-1] == tail and n != name)
    return AgentLookup(found=False, similar=similar, entry_points=sorted(e.name for e in eps), entry_point_error=error)


@functools.lru_cache(maxsize=16)  # one lookup per process and name: it imports inspect-ai (seconds of CPU)
def run_lookup(name: str, params_json: str) -> AgentLookup:
    """`lookup` in a subprocess of this interpreter with the audit's base environment."""
    with tempfile.TemporaryDirectory(prefix="sil-agent-check-") as home:
        env = {**base_env(), "HOME": home, "PYTHONDONTWRITEBYTECODE": "1"}
        cmd = [sys.executable, "-m", __name__, name, params_json]
        proc = subprocess.run(cmd, env=env, cwd=home, capture_output=True, text=True, timeout=LOOKUP_TIMEOUT_S)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"the lookup exited {proc.returncode}: {tail}")
    return AgentLookup.model_validate_json(proc.stdout.strip().splitlines()[-1])


def resolve_target_agent(contract: Contract) -> CheckItem:
    """A `target_agent` check item: ok when the audit will find the agent, else the fix."""
    petri = contract.settings(PetriParams)
    name = petri.target_agent
    try:
        found = run_lookup(name, json.dumps(petri.target_agent_params, sort_keys=True))
    except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError) as ex:
        return CheckItem(name="target_agent", status="fail", detail=f"{name}: could not look it up: {ex}")
    if found.found and found.bad_params is None:
        return CheckItem(name="target_agent", status="ok", detail=f"{name} resolves as the audit will resolve it")
    return CheckItem(name="target_agent", status="fail", detail=f"{name}: {explain(name, found)}")


def explain(name: str, found: AgentLookup) -> str:
    """What is wrong with the name and how to fix it, from what the lookup saw."""
    package, tail = name.split("/")[0], name.split("/")[-1]
    if found.found:
        return (
            f"the agent's factory does not accept petri.target_agent_params ({found.bad_params}); "
            "give it only parameters its factory declares (strings)"
        )
    if found.entry_point_error:
        return f"importing the inspect_ai entry point {package!r} failed: {found.entry_point_error}"
    if doubled := [n for n in found.similar if n == f"{package}/{package}/{tail}"]:
        return (
            f"not found: inspect-ai registered it as {doubled[0]}, because it puts the installed "
            f'package\'s name in front of the name given to @agent; write @agent(name="{tail}") '
            f"(no package prefix), and keep petri.target_agent: {name} ({DOC})"
        )
    if found.similar:
        return f"not found; registered agents with that name: {', '.join(found.similar)}: set petri.target_agent to one ({DOC})"
    if package not in found.entry_points:
        return (
            f"not found: no installed package offers the inspect_ai entry point {package!r} to this "
            f"interpreter ({sys.executable}); install your runtime into it (pip install -e <runtime>) "
            f'with [project.entry-points.inspect_ai] {package} = "{package}._registry" ({DOC})'
        )
    return (
        f"not found: the entry point {package!r} loaded but registered no agent named {name}; "
        f'import the module that declares @agent(name="{tail}") from the entry point\'s module ({DOC})'
    )


if __name__ == "__main__":
    print(lookup(sys.argv[1], json.loads(sys.argv[2])).model_dump_json())
