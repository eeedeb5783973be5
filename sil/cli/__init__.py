"""The `sil` command: typer app, the review commands around a run, the live progress display."""

__all__ = ["app", "commands", "progress"]
