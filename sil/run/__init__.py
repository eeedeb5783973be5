"""The fixed-budget loop: run context, rounds, arms, baseline, preflight, canary, certification, replication, sweeps, and the driver `train`."""

__all__ = [
    "arms",
    "baseline",
    "canary",
    "certify",
    "context",
    "preflight",
    "proposing",
    "replication",
    "rounds",
    "sweep",
    "train",
]
