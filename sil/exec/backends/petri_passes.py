"""The Petri audit with k judge passes: one `inspect eval`, then k - 1 `inspect score` re-judgings.

In sil/exec; the audit subprocess runs it (sil/exec/backends/petri.py builds the command when
`measurement.judge_resamples` > 1). Each re-judging reads the same transcripts and appends a
score (`audit_judge1`, `audit_judge2`, ...) to the one `.eval` log, with the log's own model
roles, so the judge is the contract's judge with its settings. Its model calls are in the
log's sample events, where the backend counts and charges them. Any failing step fails the
audit (exit code of that step), so a partial re-judging is never read as a finished audit.

    python -m sil.exec.backends.petri_passes --passes 3 --rubric measurement/rubric --log-dir logs -- \
        python -m inspect_ai eval inspect_petri/audit ...
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

SCORER_REF = "inspect_petri/audit_judge"


def rejudge_command(log: Path, rubric: Path) -> list[str]:
    """One more judge pass over the log's transcripts, appended to the log in place."""
    return [
        sys.executable,
        "-m",
        "inspect_ai",
        "score",
        str(log),
        "--scorer",
        SCORER_REF,
        "-S",
        f"dimensions={rubric}",
        "--action",
        "append",
        "--overwrite",
        "--display",
        "none",
    ]


def run_passes(eval_cmd: list[str], passes: int, rubric: Path, log_dir: Path) -> int:
    """The audit, then `passes - 1` re-judgings; the first non-zero exit code, or 0."""
    rc = subprocess.run(eval_cmd, stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        return rc
    logs = sorted(log_dir.glob("*.eval"))
    if len(logs) != 1:
        print(f"expected one .eval log in {log_dir} to re-judge, found {len(logs)}", file=sys.stderr)
        return 2
    for n in range(1, passes):
        rc = subprocess.run(rejudge_command(logs[0], rubric), stdin=subprocess.DEVNULL).returncode
        if rc != 0:
            print(f"judge pass {n + 1} of {passes} failed (exit {rc})", file=sys.stderr)
            return rc
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="petri_passes", description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, required=True)
    parser.add_argument("--rubric", type=Path, required=True)
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("eval_cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.eval_cmd[1:] if args.eval_cmd[:1] == ["--"] else args.eval_cmd
    if args.passes < 1 or not cmd:
        parser.error("--passes must be >= 1 and the eval command must follow `--`")
    return run_passes(cmd, args.passes, args.rubric, args.log_dir)


if __name__ == "__main__":
    sys.exit(main())
