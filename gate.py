"""gate — KEEP or REVERT: the sequential paired gate and the run's error budget.

`should_promote` is KEEP: it holds only when every leg (target superiority, non-inferiority
on each critical dimension, the auxiliary composite) crossed its boundary. Reverting is the
loop's (`sil/store/journal.py`, `sil/policies/store.py`). The code lives in `sil/stats/gate.py`;
the design is in docs/statistics.md.
"""

from sil.stats.gate import ErrorBudget, GateDecision, SequentialPairedGate, make_gate, should_promote

__all__ = ["ErrorBudget", "GateDecision", "SequentialPairedGate", "make_gate", "should_promote"]
