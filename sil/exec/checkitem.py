"""One start-time check's outcome: `sil check` prints the items; `sil run` refuses on a failed one.

A backend adds checks of its own through `AuditBackend.start_checks` (Petri: its target agent
resolves as the audit will resolve it).

    CheckItem(name="target_agent", status="fail", detail="...: how to fix it")
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class CheckItem(BaseModel):
    name: str
    status: Literal["ok", "fail", "warn"]
    detail: str
