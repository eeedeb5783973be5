"""SIL: a policy-search loop that runs outside an agent runtime and audits it.

The package is layered by folder. A module may import only from its own folder or from folders
listed before it in `LAYERS` (tests/test_layers.py enforces this; `sil_policy` is the policy
format shared with runtimes, its own distribution that imports nothing of `sil`; `sil_runtime`
the reference runtime under test, and nothing in `sil` imports the runtime). The repository's top-level card files (prepare.py, train.py,
measure.py, fitness.py, gate.py, ledger.py) are readable entry points over these packages.
"""

LAYERS: tuple[str, ...] = (
    "sil_policy",
    "sil/base",
    "sil/contract",
    "sil/policies",
    "sil/stats",
    "sil/integrity",
    "sil/exec",
    "sil/store",
    "sil/review",
    "sil/search",
    "sil/run",
    "sil/cli",
    "sil_runtime",
)

__all__ = ["LAYERS"]
