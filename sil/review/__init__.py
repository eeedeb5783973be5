"""Reading runs without changing them: run views, status, summary, report, compare, export, one line per record."""

__all__ = [
    "compare",
    "describe",
    "export",
    "plots",
    "render",
    "report",
    "runview",
    "status",
    "summary",
]
