"""The certification outlook before a run: what the contract's certification can do for a clean
champion, from the noise an earlier run of the project measured on the same measurement and
backend (its ledger's calibration record).

A run says the same once its own calibration has measured the noise (sil/run/arms.py); this says
it before any audit is paid for, so `sil check` and `sil run --dry-run` can warn that a find
would likely be rolled back while the contract can still be revised. It is advisory: the noise
is the earlier run's, and the runtime under test may have changed since.

    item = outlook_check(loaded, root)   # a CheckItem, or None when the contract certifies nothing
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sil.base.runpaths import LEDGER, run_dirs
from sil.contract import prepare
from sil.contract.approval import frozen_measurement_hash
from sil.contract.schema import LoadedContract
from sil.exec.checkitem import CheckItem
from sil.exec.measure import MeasureContext, MeasurementChanged
from sil.integrity.ledger import LedgerError, read_records_of
from sil.integrity.records import NoiseRecord, parse_payload
from sil.run.horizon import outlook_at, outlook_event
from sil.stats.fitness import NoiseEstimate
from sil_policy.files import read_regular

CALIBRATION_TYPE = "noise"


@dataclass(frozen=True)
class PriorNoise:
    """The noise an earlier run calibrated, and which run it was."""

    run_id: str
    estimate: NoiseEstimate


def prior_noise(root: Path, measurement_hash: str, backend: str) -> PriorNoise | None:
    """The calibration of the newest run of the project on this measurement and backend (None:
    no such run). A folder whose ledger cannot be read is skipped: `sil runs` says what is wrong."""
    for run_dir in reversed(run_dirs(root)):
        try:
            data = read_regular(run_dir / LEDGER)
        except OSError:
            continue
        if f'"type":"{CALIBRATION_TYPE}"'.encode() not in data:
            continue
        try:
            records = list(read_records_of(data))
        except LedgerError:
            continue
        run = next((r.payload for r in records if r.type == "contract"), None)
        if run is None or run.get("measurement_hash") != measurement_hash or run.get("backend") != backend:
            continue
        calibration = next((r for r in records if r.type == CALIBRATION_TYPE), None)
        if calibration is None:
            continue
        try:
            payload = parse_payload(calibration.type, calibration.payload)
        except ValueError:
            continue
        if isinstance(payload, NoiseRecord):
            return PriorNoise(run_id=records[0].run_id, estimate=payload.estimate)
    return None


def outlook_check(loaded: LoadedContract, root: Path) -> CheckItem | None:
    """The certification's outlook for a clean champion, from an earlier run's noise: a warning
    with the fix when it falls below `certify_power` (None: the contract certifies nothing)."""
    c = loaded.contract
    if "gate" not in c.certified_arms():
        return None
    try:
        measure = MeasureContext.from_contract(c, root)
        noise = prior_noise(root, frozen_measurement_hash(c, root), c.backend)
    except (prepare.MeasurementError, MeasurementChanged, OSError, ValueError):
        return None  # the measurement check says what is wrong
    if noise is None:
        return CheckItem(
            name="outlook",
            status="ok",
            detail="the certification's power is known once the run's calibration has measured its noise "
            "(no earlier run of this project on the same measurement and backend)",
        )
    seen = outlook_at(c, noise.estimate, measure)
    if seen is None:
        return CheckItem(
            name="outlook",
            status="ok",
            detail=f"run {noise.run_id}'s calibration lacks a certified dimension; the run's own calibration will say",
        )
    line = outlook_event(c, seen, measure).text()
    return CheckItem(
        name="outlook",
        status="warn" if seen.short else "ok",
        detail=f"{line} (noise from run {noise.run_id}'s calibration; tolerance, level and rounds from this contract)",
    )
