"""The local-model path without a model: a stub OpenAI-compatible server on 127.0.0.1.

Every model call is bounded (a mutator whose server answers HTTP 500 forever ends the run at
max_wall_s with a halt record), the mutator asks for its tool by name, and `sil check` names
what a local server lacks.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

pytest.importorskip("openai", reason="the local-model path needs the openai SDK: pip install -e '.[local]'")

from local_stub import StubServer  # noqa: E402

from sil.base.errors import Halt  # noqa: E402
from sil.contract.schema import parse_contract  # noqa: E402
from sil.integrity import ledger  # noqa: E402
from sil.search.proposers.llm import LLMProposer  # noqa: E402
from tests.conftest import edit_contract  # noqa: E402
from tests.run.test_train import run_loop, shrink  # noqa: E402
from tests.search.test_llm_mutator import champion, context, request  # noqa: E402,F401  (fixture)

REPO = Path(__file__).resolve().parents[2]
MUTATOR_LINE = "  mutator: {model: scripted/mutator}   # offline, deterministic; any inspect-ai model name works"


def local_mutator(url: str, extra: str = "") -> str:
    return f"  mutator: {{model: llama-cpp-python/stub-model, base_url: '{url}'{extra}}}"


def test_the_mutator_asks_for_its_tool_by_name(champion, tmp_path: Path) -> None:  # noqa: F811
    text = (REPO / "program.md").read_text().replace(MUTATOR_LINE, local_mutator("URL"))
    with StubServer("ok") as stub:
        loaded = parse_contract(text.replace("URL", stub.base_url).replace("arms: [", "local: true\narms: ["))
        proposal = LLMProposer(loaded).propose(request(champion, context(), tmp=tmp_path))
    # the stub answers tool_choice "required" with HTTP 500, as llama.cpp's server does: a named
    # tool choice is answered (its empty arguments are then rejected as an invalid mutation)
    assert proposal.calls and all("500" not in (c.error or "") for c in proposal.calls)
    assert proposal.calls[0].input_tokens > 0 and "lacks the fields" in (proposal.calls[0].error or "")


def test_a_prompt_too_long_for_the_mutator_model_is_a_gap_that_says_so(champion, tmp_path: Path) -> None:  # noqa: F811
    from local_stub import CONTEXT_ERROR

    text = (REPO / "program.md").read_text().replace(MUTATOR_LINE, local_mutator("URL"))
    with StubServer("context") as stub:
        loaded = parse_contract(text.replace("URL", stub.base_url).replace("arms: [", "local: true\narms: ["))
        proposal = LLMProposer(loaded).propose(request(champion, context(), tmp=tmp_path))
    # not "answer with exactly one call of the tool": the model never saw a whole prompt
    assert proposal.gap is not None and "exceed the model's context" in proposal.gap and CONTEXT_ERROR in proposal.gap
    assert len(proposal.calls) == 1  # a retry would only send a longer prompt


@pytest.mark.slow  # waits out max_wall_s (~45 s): .ci/run runs it after the default suite
def test_a_mutator_server_failing_forever_halts_the_run_at_max_wall_s(workspace: Path) -> None:
    shrink(workspace)
    contract = workspace / "program.md"
    with StubServer("fail") as stub:
        edit_contract(contract, MUTATOR_LINE, local_mutator(stub.base_url))
        edit_contract(contract, "arms: [never, random, gate]", "local: true\narms: [never, random, gate]")
        edit_contract(contract, "max_wall_s: 600", "max_wall_s: 45")
        start = time.monotonic()
        rc = run_loop(workspace)
        took = time.monotonic() - start
    assert rc.state.phase == "halted", rc.state.halt_reason
    assert "wall-time budget reached during a mutator model call" in (rc.state.halt_reason or "")
    halts = [r for r in ledger.read_records(rc.run_dir / "ledger.jsonl") if r.type == "halt"]
    assert len(halts) == 1 and "mutator model call" in halts[0].payload["reason"]
    assert len(stub.requests) >= 2  # the provider retried: only the wall budget ended it
    # the provider alone would retry for 30 minutes; a loaded machine may add a minute or two
    assert took < 45 + 150, f"the run took {took:.0f}s, far past max_wall_s 45"


def test_a_mutator_call_past_the_wall_budget_is_never_made(champion, tmp_path: Path) -> None:  # noqa: F811
    text = (REPO / "program.md").read_text().replace(MUTATOR_LINE, local_mutator("URL"))
    with StubServer("ok") as stub:
        loaded = parse_contract(text.replace("URL", stub.base_url).replace("arms: [", "local: true\narms: ["))
        req = request(champion, context(), tmp=tmp_path)
        late = dataclasses.replace(req, wall_left=lambda: 0.0)
        with pytest.raises(Halt, match="wall-time budget reached before a mutator model call"):
            LLMProposer(loaded).propose(late)
    assert stub.requests == []


LOCAL = (REPO / "examples" / "program-local-model.md").read_text()


def local_contract(url: str, model: str = "stub-model"):
    text = LOCAL.replace("http://127.0.0.1:8765/v1", url).replace(
        "llama-cpp-python/smollm2-135m", f"llama-cpp-python/{model}"
    )
    text = text.replace(
        "mutator: {model: offline/catalogue}", f"mutator: {{model: llama-cpp-python/{model}, base_url: '{url}'}}"
    )
    return parse_contract(text, str(REPO / "examples" / "program-local-model.md"))


def server_items(loaded) -> dict[str, tuple[str, str]]:
    from sil.exec.startchecks import start_checks

    return {
        i.name: (i.status, i.detail) for i in start_checks(loaded, REPO).items if i.name.startswith(("server", "sdk"))
    }


def test_sil_check_names_what_a_local_server_lacks(monkeypatch) -> None:
    with StubServer("ok") as stub:
        assert server_items(local_contract(stub.base_url))["server:mutator"][0] == "ok"
        missing = server_items(local_contract(stub.base_url, "other-model"))
        assert (
            missing["server:target"][0] == "fail" and "model not served: 'other-model'" in missing["server:target"][1]
        )
    with StubServer("text") as stub:
        items = server_items(local_contract(stub.base_url))
        assert items["server:mutator"][0] == "fail" and "tool calls unsupported" in items["server:mutator"][1]
        assert items["server:target"][0] == "warn"  # a target answering in text is what the audit measures
    gone = server_items(local_contract(stub.base_url))  # the server is stopped now
    assert gone["server:target"][0] == "fail" and "server unreachable" in gone["server:target"][1]
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openai" else real(name, *a))
    sdk = server_items(local_contract(stub.base_url))
    assert sdk["sdk:target"][0] == "fail" and "pip install -e '.[local]'" in sdk["sdk:target"][1]


DEAD_PROXY = "http://10.255.255.1:9"  # no route in the namespace: a proxied connection fails


@pytest.mark.slow  # a whole run or real audits: .ci/run runs it after make test
def test_a_local_audit_opens_no_connection_but_loopback(tmp_path: Path) -> None:
    """In a network namespace with only loopback (and proxies pointed at a dead address), a local
    audit completes: the target, the token counts and everything else stay on 127.0.0.1."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rn", "true"]).returncode != 0:
        pytest.skip("needs `unshare -rn` (an unprivileged network namespace) to cut every route but loopback")
    env = {**os.environ, "HTTP_PROXY": DEAD_PROXY, "HTTPS_PROXY": DEAD_PROXY, "ALL_PROXY": DEAD_PROXY}
    script = f"ip link set lo up && exec {sys.executable} {REPO / 'tests' / 'local_stub.py'} audit {tmp_path}"
    done = subprocess.run(["unshare", "-rn", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    result = out["result"]
    assert result["status"] == "ok", result["gap_reason"]
    assert result["usage"]["input_tokens"] > 0 and out["requests"] > 0  # the target really ran, on loopback
    assert not (tmp_path / "a1" / ".cache").exists() or not any((tmp_path / "a1" / ".cache").rglob("*tiktoken*"))


def test_local_audits_count_tokens_by_characters_without_a_tokenizer(monkeypatch) -> None:
    import asyncio

    import tiktoken
    from inspect_ai.model import _model, _tokens, get_model

    from sil_runtime.inspect_ext.local import install_if_asked

    monkeypatch.setattr(_model, "count_text_tokens", _model.count_text_tokens)  # restored after the test
    monkeypatch.setattr(_tokens, "count_text_tokens", _tokens.count_text_tokens)

    def no_download(name: str):
        raise AssertionError(f"tokenizer {name} requested: it would be downloaded")

    monkeypatch.setattr(tiktoken, "get_encoding", no_download)
    monkeypatch.setenv("SIL_TOKEN_COUNT", "chars")
    install_if_asked()  # what the audit subprocess does on importing the registry
    model = get_model("llama-cpp-python/x", base_url="http://127.0.0.1:1/v1", memoize=False)
    assert asyncio.run(model.api.count_text_tokens("abcdefghi")) == 3


def test_sil_check_says_what_judges_a_local_run_as_the_run_does() -> None:
    from sil.contract.schema import LIVE_JUDGE_NOTE, run_note
    from sil.exec.startchecks import start_checks

    loaded = local_contract("http://127.0.0.1:9/v1")
    (backend,) = [i for i in start_checks(loaded, REPO).items if i.name == "backend"]
    assert "rule-based judge" in backend.detail and LIVE_JUDGE_NOTE not in backend.detail
    assert backend.detail.endswith(run_note(loaded.contract))
