"""A module the warm-worker tests fork (`python -m tests.warm_probe MODE`): reports what its process sees."""

from __future__ import annotations

import json
import os
import sys
import time

import tests


def warm() -> None:
    """Runs once in the warm worker: the forked audit reports in whose process it ran."""
    tests.warmed_in = os.getpid()  # type: ignore[attr-defined]


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "report":
        print(
            json.dumps(
                {
                    "env": dict(os.environ),
                    "argv": sys.argv[1:],
                    "cwd": os.getcwd(),
                    "pid": os.getpid(),
                    "pgid": os.getpgid(0),
                    "sid": os.getsid(0),
                    "stdin": sys.stdin.read(),
                    "warmed_in": getattr(tests, "warmed_in", None),
                }
            )
        )
        print("to stderr", file=sys.stderr)
    elif mode == "sleep":
        time.sleep(float(sys.argv[2]))
    elif mode == "raise":
        raise ValueError("probe failure")
    raise SystemExit(int(sys.argv[2]) if mode == "exit" else None)
