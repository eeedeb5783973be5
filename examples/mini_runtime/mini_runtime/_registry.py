"""Imported by inspect-ai through the `inspect_ai` entry point named `mini_runtime` (the package
prefix of the names it looks up): registers the agent `mini_runtime/mini_target`."""

from mini_runtime.agent import mini_target  # noqa: F401
