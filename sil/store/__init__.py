"""A run's persisted state: run state, journal, policy history in git refs, and promotion into the user's policies."""

__all__ = ["journal", "policyrefs", "release", "runstate", "champion"]
