"""Statistics, pure and I/O-free: per-dimension fitness and paired rounds, the sequential gate, the arms' judging rules."""

__all__ = ["alphaspent", "fitness", "gate", "judges"]
