"""The reference runtime under test: a small agent runtime with policy loaders, its inspect-ai
target and offline models, and the simulated world the `sim` backend audits. It reads policy
only through `sil_policy`; the loop never imports it."""
