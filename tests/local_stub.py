"""A tiny OpenAI-compatible server on 127.0.0.1 for tests of the local-model path (no model, no network).

mode "ok": answers /v1/models with its one model and /v1/chat/completions like a small model
that writes its tool calls as text unless its prompt asks for the native interface (then it
calls the first offered tool natively, or the one a named tool_choice asks for); "fail": every
request is an HTTP 500 (the llama.cpp server's answer to tool_choice="required"); "hang":
every completion waits `hang_s` before it answers; "text": never a tool call; "context": every completion is
HTTP 400 "maximum context length" (a prompt too long for the server's n_ctx); "segv": the process
kills itself with SIGSEGV on its first completion, as a llama.cpp build for another CPU does (run
it as its own process: `python tests/local_stub.py serve --port P --mode segv`). Like llama.cpp's
server, any mode answers tool_choice "required" (inspect-ai's "any") with HTTP 500.

    with StubServer("ok") as stub:
        stub.base_url          # http://127.0.0.1:<port>/v1
        stub.requests          # paths served, in order
"""

from __future__ import annotations

import json
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "stub-model"
NATIVE_HINT = "native tool-calling"
CONTEXT_ERROR = "This model's maximum context length is 4096 tokens. However, you requested 4725 tokens."
SEGV_LINE = "stub: ggml_compute_forward: illegal instruction on this CPU, segfaulting"


def completion(body: dict[str, Any], text_only: bool = False) -> dict[str, Any]:
    text = json.dumps(body.get("messages", []))
    tools = body.get("tools") or []
    choice = body.get("tool_choice")
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if tools and (named or NATIVE_HINT in text) and not text_only:
        name = named or tools[0]["function"]["name"]
        call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}
        message["tool_calls"] = [call]
        finish = "tool_calls"
    else:
        message["content"] = (
            'Checking. <tool_call>{"name": "lookup_order", "arguments": {"order_id": "42"}}</tool_call>'
        )
        finish = "stop"
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", MODEL),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": max(1, len(text) // 4),
            "completion_tokens": 17,
            "total_tokens": len(text) // 4 + 17,
        },
    }


class StubServer:
    def __init__(self, mode: str = "ok", hang_s: float = 30.0, port: int = 0) -> None:
        self.mode = mode
        self.hang_s = hang_s
        self.requests: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                stub.requests.append(self.path)
                if stub.mode == "fail":
                    return self._send(500, {"error": {"message": "stub: internal error"}})
                self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})

            def do_POST(self) -> None:
                stub.requests.append(self.path)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if stub.mode == "fail" or body.get("tool_choice") == "required":  # as llama.cpp's server does
                    return self._send(500, {"error": {"message": "stub: internal error"}})
                if stub.mode == "context":  # llama-cpp-python's answer to a prompt past its n_ctx
                    error = {
                        "message": CONTEXT_ERROR,
                        "type": "invalid_request_error",
                        "code": "context_length_exceeded",
                    }
                    return self._send(400, {"error": error})
                if stub.mode == "hang":
                    time.sleep(stub.hang_s)
                if stub.mode == "segv":
                    print(SEGV_LINE, flush=True)
                    # at this thread, as a real fault is (a process-wide kill could let this thread
                    # answer while a fault handler such as faulthandler runs elsewhere)
                    signal.pthread_kill(threading.get_ident(), signal.SIGSEGV)
                self._send(200, completion(body, text_only=stub.mode == "text"))

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> StubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def one_local_audit(workdir: str) -> dict[str, Any]:
    """One Petri audit of the local example contract against a stub target on 127.0.0.1, as the loop runs it."""
    import shutil
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    from sil.contract.schema import parse_contract
    from sil.exec.backends.petri import PetriBackend
    from sil.exec.measure import AuditRequest, MeasureContext, run_audit
    from sil_policy import SURFACES, content_hash

    root = Path(workdir)
    shutil.copytree(repo / "measurement", root / "measurement")
    policies = repo / "state" / "policies"
    text = (repo / "examples" / "program-local-model.md").read_text()
    with StubServer("ok") as stub:
        text = text.replace("http://127.0.0.1:8765/v1", stub.base_url)
        contract = parse_contract(text.replace("llama-cpp-python/smollm2-135m", f"llama-cpp-python/{MODEL}")).contract
        ctx = MeasureContext.from_contract(contract, root)
        hashes = {n: content_hash((policies / s.filename).read_bytes()) for n, s in SURFACES.items()}
        req = AuditRequest(audit_id="a1", audit_dir=root / "a1", policy_dir=policies, policy_hashes=hashes, tick=0)
        result = run_audit(req, ctx, PetriBackend())
        return {"result": result.model_dump(mode="json"), "requests": len(stub.requests)}


def serve(port: int, mode: str) -> None:
    """Serve in the foreground until killed (or, in mode "segv", until the first completion)."""
    with StubServer(mode, port=port) as stub:
        print(f"stub serving {MODEL} on {stub.base_url} ({mode})", flush=True)
        stub.thread.join()


if __name__ == "__main__":
    # python tests/local_stub.py audit WORKDIR: one audit, its result as JSON
    # python tests/local_stub.py serve --port P --mode M: a stub server in its own process
    import sys

    if sys.argv[1] == "serve":
        serve(int(sys.argv[sys.argv.index("--port") + 1]), sys.argv[sys.argv.index("--mode") + 1])
    else:
        print(json.dumps(one_local_audit(sys.argv[2])))
