"""Ground floor: errors and exit codes, durable file writes, strict YAML, run ids and where runs live, disk space, locks, SSH signatures, the paid-call journal, test-only fault injection. No project imports."""

__all__ = ["diskspace", "errors", "faults", "fsutil", "locks", "runid", "runpaths", "sshsig", "yamlstrict"]
