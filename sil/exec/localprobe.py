"""Probes of a local OpenAI-compatible server (llama.cpp, vLLM, Ollama) for `sil check`: loopback only.

Each returns None when the server is fine, else a `Problem`: one line saying what is missing,
and whether the server is down (then nothing can be audited on it). A server that does not
answer is named crashed, with its exit signal, its log's last lines and the fix, when its
supervisor recorded that (sil/exec/serverstate.py); else unreachable. No proxy is used (a proxy
would be a connection off this machine).

    models("http://127.0.0.1:8765/v1", "smollm2-135m")      # None, or Problem("model not served: ...")
    tool_call("http://127.0.0.1:8765/v1", "smollm2-135m")   # None, or Problem("tool calls unsupported: ...")
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from sil.base.errors import Halt
from sil.contract.schema import Contract, RoleModel, is_loopback_url
from sil.exec import serverstate

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Answer the probe.",
        "parameters": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    },
}


@dataclass(frozen=True)
class Problem:
    text: str
    down: bool = False  # the server does not answer at all (crashed or unreachable)

    def __str__(self) -> str:
        return self.text


def not_answering(base_url: str, ex: BaseException, during: str = "") -> Problem:
    """A server that did not answer: crashed (its supervisor's record says how) or unreachable."""
    crash = serverstate.explain_down(base_url)
    if crash is not None:
        return Problem(f"server down{during}: {crash}", down=True)
    reason = getattr(ex, "reason", ex)
    if isinstance(reason, TimeoutError):  # alive but busy: a one-thread llama.cpp server answers nothing mid-completion
        return Problem(f"server busy{during}: no answer in time ({reason}); it may be working on a long completion")
    return Problem(f"server unreachable{during} ({reason}); start it (docs/local-models.md) or fix base_url", down=True)


def _call(url: str, body: dict[str, Any] | None, timeout: float) -> tuple[int, Any]:
    if not is_loopback_url(url):
        raise ValueError(f"{url} is not a loopback address: the probe only calls this machine")
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as ex:
        return ex.code, None


def models(base_url: str, model: str, timeout: float = 5.0) -> Problem | None:
    """Whether the server answers and lists `model`."""
    try:
        status, payload = _call(base_url.rstrip("/") + "/models", None, timeout)
    except (OSError, ValueError, http.client.HTTPException) as ex:
        return not_answering(base_url, ex)
    if status != 200 or not isinstance(payload, dict):
        return Problem(f"server unreachable: GET /models answered HTTP {status}")  # it answers: not down
    ids = [m.get("id") for m in payload.get("data", []) if isinstance(m, dict)]
    if model not in ids:
        return Problem(f"model not served: {model!r} is not among {ids}; serve it under that name (e.g. --model_alias)")
    return None


def tool_call(base_url: str, model: str, timeout: float = 60.0) -> Problem | None:
    """Whether a named tool choice gets a native tool call back (Petri's roles and the mutator need it)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Call the ping tool with ok=true."}],
        "tools": [PROBE_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "ping"}},
        "max_tokens": 32,
    }
    try:
        status, payload = _call(base_url.rstrip("/") + "/chat/completions", body, timeout)
    except (OSError, ValueError, http.client.HTTPException) as ex:
        return not_answering(base_url, ex, " during the tool-call probe")
    if status != 200 or not isinstance(payload, dict):
        return Problem(f"tool calls unsupported: a named tool choice was answered with HTTP {status}")
    message = (payload.get("choices") or [{}])[0].get("message") or {}
    if not message.get("tool_calls"):
        return Problem("tool calls unsupported: a named tool choice was answered with text, not a tool call")
    return None


AUDIT_ROLES = ("auditor", "target", "judge")  # the mutator runs in the loop, not in an audit


class ServerDown(Halt):
    """An audit failed while a loopback model server was down: its outcome says nothing about the
    policy, so the run halts (the audit is re-run on resume) rather than count a gap."""


def server_down(contract: Contract) -> str | None:
    """The first audit role whose loopback server does not answer, and why; None when all answer."""
    for role in AUDIT_ROLES:
        if down := role_down(role, getattr(contract.models, role)):
            return down
    return None


def role_down(role: str, rm: RoleModel) -> str | None:
    """Why the role's loopback server does not answer at all; None when it answers or is not loopback."""
    if rm.offline or not rm.loopback or rm.base_url is None:
        return None
    served = rm.model.split("/", 1)[1] if "/" in rm.model else rm.model
    problem = models(rm.base_url, served)
    if problem is not None and problem.down:
        return f"the {role}'s model server ({rm.base_url}) is down: {problem}"
    return None
