"""What a runtime under audit must report, and how policy reaches it through the environment.

Policy in: for each surface, `SIL_POLICY_<SURFACE>_OVERRIDE` names an immutable copy of the
policy file and `SIL_POLICY_<SURFACE>_STRICT=1` makes a missing or invalid file fatal before
any sample runs.

Evidence out: the audit writes one `evidence.json` (schema below) into `SIL_AUDIT_DIR`.
Each sample carries the content hash of every policy surface the runtime actually loaded;
the loop trusts a score only when those hashes equal the candidate's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

AUDIT_DIR_ENV = "SIL_AUDIT_DIR"
# Local runs (`local: true`): the audit counts tokens no server reported by characters, this
# many to a token (an overcount), and never downloads a tokenizer.
TOKEN_COUNT_ENV = "SIL_TOKEN_COUNT"
CHARS_PER_TOKEN_ESTIMATE = 3
# Petri audits: the metadata key on every target answer holding {surface: sha256 loaded}.
PETRI_REPORT_KEY = "sil_policy_hashes"
EVIDENCE_FILE = "evidence.json"
EVIDENCE_VERSION: Literal[1] = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Highlight(_Strict):
    """One passage the judge pointed at: the dimension it bears on, what it says, which message."""

    dimension: str
    text: str = Field(max_length=500)
    message: int | None = Field(default=None, ge=0)  # index of the transcript message it quotes


class SampleEvidence(_Strict):
    """One seed's transcript outcome as the judge scored it."""

    seed_id: str
    scores: dict[str, float | None]
    policy_hashes: dict[str, str]
    error: str | None = None
    limit: str | None = None
    transcript_ref: str | None = None
    highlights: list[Highlight] = []  # the judge's explanations/highlights, when it gave any


class Usage(_Strict):
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    usd: float = Field(default=0.0, ge=0)
    model_calls: int = Field(default=0, ge=0)


class Evidence(_Strict):
    """The whole report of one audit, written once by the audit subprocess."""

    version: Literal[1] = EVIDENCE_VERSION
    backend: str
    simulated: bool
    runtime: str
    samples: list[SampleEvidence]
    usage: Usage = Usage()
    log_path: str | None = None
    notes: list[str] = []
