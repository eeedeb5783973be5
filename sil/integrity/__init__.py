"""Tamper evidence: ledger record types, the hash-chained ledger, checkpoints, the outside witness and `sil ledger verify`."""

__all__ = ["chain", "checkpoint", "gitrefs", "ledger", "quickcheck", "records", "verify", "witness"]
