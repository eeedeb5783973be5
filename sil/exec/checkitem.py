"""One start-time check's outcome, and the hook through which a backend adds its own checks.

`sil check` prints the items; `sil run` refuses on a failed one. A backend that can check more
than the contract's fields before an audit (Petri: that its target agent resolves) offers
`start_checks(contract)`; `sil.exec.startchecks` calls it for the contract's backend.

    if isinstance(backend, BackendStartChecks):
        items += backend.start_checks(contract)
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from sil.contract.schema import Contract


class CheckItem(BaseModel):
    name: str
    status: Literal["ok", "fail", "warn"]
    detail: str


@runtime_checkable
class BackendStartChecks(Protocol):
    """A backend's own checks before its first audit (offline; each may run a subprocess)."""

    def start_checks(self, contract: Contract) -> list[CheckItem]: ...
