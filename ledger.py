"""ledger — the append-only, hash-chained record of a run: baselines with provenance, results, mutations.

Every measurement, verdict and policy change is written once; `sil ledger verify` checks the chain,
its checkpoints and its witness. The code lives in `sil/integrity/` (ledger.py, records.py, verify.py).
"""

from sil.integrity.ledger import Ledger, LedgerError, Record, read_records, verify_file

__all__ = ["Ledger", "LedgerError", "Record", "read_records", "verify_file"]
