"""The run contract: its schema and canonical hash, the frozen measurement (seed library, rubric), the contract history and approvals."""

__all__ = ["approval", "certifies", "history", "prepare", "schema", "simparams"]
