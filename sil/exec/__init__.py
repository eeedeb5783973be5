"""Running audits: the audit subprocess and its attempts log, the backends (sim, petri), the Ray executor, the checks before a run spends anything."""

__all__ = [
    "attempts",
    "auditcount",
    "auditproc",
    "backends",
    "localprobe",
    "measure",
    "modelcalls",
    "rayexec",
    "startchecks",
    "zygote",
]
