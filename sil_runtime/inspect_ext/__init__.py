"""The reference runtime exposed to inspect-ai, so Petri can audit it.

target.py   the Petri target agent `sil_runtime/runtime_target` (runtime under audit)
offline/    the `scripted/<role>` model provider: auditor, judge and target with no network
_registry   what inspect-ai imports through the `inspect_ai` entry point of this package
"""
