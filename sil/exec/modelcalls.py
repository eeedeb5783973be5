"""A journal of paid model calls, so a crash never makes the loop pay for the same call twice.

In sil/exec, used by the LLM mutator and the judge-drift canary. Before a caller calls a model it
writes a `pending` marker with the call's worst-case cost; when the output arrives it is saved
atomically next to it. A resumed run that asks the same question (same arm, candidate,
attempt, call number and prompt hash) replays the saved output instead of calling the model
again. A marker with no output means a call was made and its answer was lost to the crash:
the caller charges that call its bound, so the run's USD budget still counts it, and then
calls again.

    journal = CallJournal(work_dir, CallKey(arm="gate", index=3, attempt=0, call=0, prompt_sha256=sha))
    lost = journal.lost(ModelOutput)                # calls lost to a crash, to charge their bounds
    output = journal.replay(ModelOutput)            # None unless a saved output exists
    journal.begin(bound, lost); ...; journal.finish(output.model_dump_json())
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sil.base.fsutil import atomic_write_bytes
from sil.contract.schema import RoleModel

PENDING_SUFFIX = ".pending.json"
OUTPUT_SUFFIX = ".output.json"
Output = TypeVar("Output", bound=BaseModel)


@dataclass(frozen=True)
class CallKey:
    """What makes two calls the same question."""

    arm: str
    index: int
    attempt: int
    call: int
    prompt_sha256: str

    @property
    def stem(self) -> str:
        return f"{self.arm or 'arm'}-c{self.index:03d}-a{self.attempt}-n{self.call}-{self.prompt_sha256[:16]}"


@dataclass(frozen=True)
class Lost:
    """Calls made before a crash whose outputs were never saved: they were (or may be) paid."""

    calls: int = 0
    usd: float = 0.0


class CallJournal:
    """The pending marker and saved output of one model call, in the proposer's work directory."""

    def __init__(self, work_dir: Path | None, key: CallKey) -> None:
        self.work_dir = work_dir
        self.key = key

    def _path(self, suffix: str) -> Path | None:
        return None if self.work_dir is None else self.work_dir / "calls" / (self.key.stem + suffix)

    def replay(self, model: type[Output]) -> Output | None:
        """The saved output of this call, if it finished before a crash; None otherwise."""
        path = self._path(OUTPUT_SUFFIX)
        if path is None or not path.is_file():
            return None
        try:
            return model.model_validate_json(path.read_bytes())
        except ValidationError:
            return None  # a torn or foreign file: the call is treated as lost, never trusted

    def lost(self, model: type[BaseModel]) -> Lost:
        """The calls lost to crashes before this call's saved output, and their bounds."""
        pending = self._path(PENDING_SUFFIX)
        if pending is None or not pending.is_file():
            return Lost()
        try:
            marker = json.loads(pending.read_text())
            before = Lost(calls=int(marker["lost_calls"]), usd=float(marker["lost_usd"]))
            bound = float(marker["bound_usd"])
        except (ValueError, KeyError, TypeError):
            return Lost()
        if self.replay(model) is not None:
            return before
        return Lost(calls=before.calls + 1, usd=before.usd + bound)

    def begin(self, bound_usd: float, lost: Lost) -> None:
        """Mark the call as started, before any money is spent on it."""
        path = self._path(PENDING_SUFFIX)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            marker = {"bound_usd": bound_usd, "lost_usd": lost.usd, "lost_calls": lost.calls}
            atomic_write_bytes(path, json.dumps(marker).encode())

    def finish(self, output_json: str) -> None:
        """Save the call's output; from now on a resumed run replays it."""
        path = self._path(OUTPUT_SUFFIX)
        if path is not None:
            atomic_write_bytes(path, output_json.encode())


def trusted_tokens(usage: Any) -> tuple[int, int] | None:
    """(input, output) tokens a provider reported, or None when the report cannot be priced
    (missing, negative, not whole numbers): the caller then charges the call its worst case.
    A provider's usage is its claim; a negative count must never lower or crash the budget."""
    if usage is None:
        return None
    fields = ("input_tokens", "output_tokens", "input_tokens_cache_read", "input_tokens_cache_write")
    counts = [getattr(usage, f, None) for f in fields]
    counts[2:] = [c or 0 for c in counts[2:]]  # cache counts are optional
    ints = [c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c >= 0]
    if len(ints) != len(counts):
        return None
    return ints[0] + ints[2] + ints[3], ints[1]


class WallTimeReached(RuntimeError):
    """A model call was abandoned because the run's wall-time budget ran out."""


def run_bounded[T](call: Coroutine[Any, Any, T], wall_left: float | None, what: str) -> T:
    """Run one model call to completion, or abandon it when the run's wall budget runs out.

    Provider timeouts and retry limits bound a single call; this bounds the run: a server that
    answers HTTP 500 forever, retried by the provider, cannot hold the run past max_wall_s.
    """
    if wall_left is not None and wall_left <= 0:
        call.close()
        raise WallTimeReached(f"wall-time budget reached before a {what} model call")

    async def bounded() -> T:
        limit = asyncio.timeout(wall_left)
        try:
            async with limit:
                return await call
        except TimeoutError:
            if limit.expired():  # ours, not a provider's own timeout
                raise WallTimeReached(
                    f"wall-time budget reached during a {what} model call (abandoned after {wall_left:.0f}s)"
                ) from None
            raise

    return asyncio.run(bounded())


def role_model(role: RoleModel, max_tokens: int | None = None) -> Any:
    """The inspect-ai model a contract role names, with its endpoint, provider args and call limits."""
    from inspect_ai.model import GenerateConfig, get_model

    limits = {"max_tokens": max_tokens, **role.generate_limits()}
    config = GenerateConfig(temperature=role.temperature, **limits)
    args: dict[str, Any] = dict(role.model_args)
    return get_model(role.model, config=config, base_url=role.endpoint(), memoize=False, **args)
