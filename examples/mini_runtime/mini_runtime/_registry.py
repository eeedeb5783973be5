"""Imported by inspect-ai through the `inspect_ai` entry point: registers `mini_runtime/mini_target`."""

from mini_runtime.agent import mini_target  # noqa: F401
