"""measure — the audit subprocess: one audit of one policy set, with a fixed timeout.

Reads the selected policy files and passes, per surface, an OVERRIDE path and STRICT=1 into
the audit's environment; a missing or untrusted output is a gap, never a score. The code lives
in `sil/exec/measure.py` (backends in `sil/exec/backends/`, the process in `sil/exec/auditproc.py`).
"""

from sil.exec.measure import AuditBackend, AuditRequest, AuditResult, MeasureContext, run_audit, run_audits

__all__ = ["AuditBackend", "AuditRequest", "AuditResult", "MeasureContext", "run_audit", "run_audits"]
