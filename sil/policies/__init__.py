"""The runtime's policy files as the loop sees them: typed one-surface mutations and content-addressed policy sets."""

__all__ = ["mutation", "setid", "store"]
