"""Probes of a local OpenAI-compatible server (llama.cpp, vLLM, Ollama) for `sil check`: loopback only.

Each returns None when the server is fine, else one line saying what is missing. No proxy is
used (a proxy would be a connection off this machine).

    models("http://127.0.0.1:8765/v1", "smollm2-135m")      # None, or "not served: ..."
    tool_call("http://127.0.0.1:8765/v1", "smollm2-135m")   # None, or "tool calls unsupported: ..."
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from sil.contract.schema import is_loopback_url

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Answer the probe.",
        "parameters": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    },
}


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


def models(base_url: str, model: str, timeout: float = 5.0) -> str | None:
    """Whether the server answers and lists `model`."""
    try:
        status, payload = _call(base_url.rstrip("/") + "/models", None, timeout)
    except (OSError, ValueError) as ex:
        reason = getattr(ex, "reason", ex)
        return f"server unreachable ({reason}); start it (docs/local-models.md) or fix base_url"
    if status != 200 or not isinstance(payload, dict):
        return f"server unreachable: GET /models answered HTTP {status}"
    ids = [m.get("id") for m in payload.get("data", []) if isinstance(m, dict)]
    if model not in ids:
        return f"model not served: {model!r} is not among {ids}; serve it under that name (e.g. --model_alias)"
    return None


def tool_call(base_url: str, model: str, timeout: float = 60.0) -> str | None:
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
    except (OSError, ValueError) as ex:
        return f"server unreachable during the tool-call probe ({getattr(ex, 'reason', ex)})"
    if status != 200 or not isinstance(payload, dict):
        return f"tool calls unsupported: a named tool choice was answered with HTTP {status}"
    message = (payload.get("choices") or [{}])[0].get("message") or {}
    if not message.get("tool_calls"):
        return "tool calls unsupported: a named tool choice was answered with text, not a tool call"
    return None
