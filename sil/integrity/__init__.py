"""Tamper evidence: ledger record types, the hash-chained ledger, checkpoints, the outside witness and `sil ledger verify`."""

__all__ = ["checkpoint", "gitrefs", "ledger", "records", "verify", "witness"]
