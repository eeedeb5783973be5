"""Where candidates come from: the evidence proposers read, and the proposers (catalogue, LLM mutator) in a registry."""

__all__ = ["evidence", "proposers"]
