"""The certification outlook before a run: what the contract's certification can do for a clean
champion, from the noise an earlier run of the project measured on the same measurement and
backend (its ledger's calibration record), or else from the newest `sil noise` on them (its
variance parts, predicted for the contract's judge passes and CRN: sil/run/noise.py).

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
from sil.contract.schema import Contract, LoadedContract
from sil.exec.checkitem import CheckItem
from sil.exec.measure import MeasureContext, MeasurementChanged
from sil.integrity.ledger import LedgerError, read_records_of
from sil.integrity.records import NoiseRecord, parse_payload
from sil.run.horizon import outlook_at, outlook_event
from sil.run.noise import NOISE_FILE, MeasuredNoise
from sil.stats.fitness import NoiseEstimate
from sil_policy.files import read_regular

CALIBRATION_TYPE = "noise"


NOISE_DIR = Path("state") / "noise"


@dataclass(frozen=True)
class PriorNoise:
    """Noise measured before this run, and where: `source` completes "noise from ..."."""

    source: str
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
            return PriorNoise(source=f"run {records[0].run_id}'s calibration", estimate=payload.estimate)
    return None


def noise_command_noise(root: Path, measurement_hash: str, c: Contract) -> PriorNoise | None:
    """The newest `sil noise` of the project on this measurement and backend with two usable pairs,
    predicted for the contract's judge passes and CRN (None: there is none). Unreadable files are skipped."""
    found: list[MeasuredNoise] = []
    for path in sorted((root / NOISE_DIR).glob(f"*/{NOISE_FILE}")):
        try:
            found.append(MeasuredNoise.model_validate_json(read_regular(path)))
        except (OSError, ValueError):
            continue
    same = [m for m in found if m.measurement_hash == measurement_hash and m.backend == c.backend]
    settings = c.measurement
    for newest in sorted(same, key=lambda m: m.measured_at, reverse=True):
        estimate = newest.estimate(settings.judge_resamples, settings.common_random_numbers)
        if estimate is not None:
            return PriorNoise(source=f"`sil noise` of {newest.measured_at}", estimate=estimate)
    return None


def outlook_check(loaded: LoadedContract, root: Path) -> CheckItem | None:
    """The certification's outlook for a clean champion, from an earlier run's noise: a warning
    with the fix when it falls below `certify_power` (None: the contract certifies nothing)."""
    c = loaded.contract
    if "gate" not in c.certified_arms():
        return None
    try:
        measure = MeasureContext.from_contract(c, root)
        measured = frozen_measurement_hash(c, root)
        noise = prior_noise(root, measured, c.backend) or noise_command_noise(root, measured, c)
    except (prepare.MeasurementError, MeasurementChanged, OSError, ValueError):
        return None  # the measurement check says what is wrong
    if noise is None:
        return CheckItem(
            name="outlook",
            status="ok",
            detail="the certification's power is known once the run's calibration has measured its noise "
            "(no earlier run or `sil noise` of this project on the same measurement and backend)",
        )
    seen = outlook_at(c, noise.estimate, measure)
    if seen is None:
        return CheckItem(
            name="outlook",
            status="ok",
            detail=f"the noise from {noise.source} has no positive SD on some certified leg (a dimension "
            "missing, or audits that never varied); the run's own calibration will say",
        )
    line = outlook_event(c, seen, measure).text()
    return CheckItem(
        name="outlook",
        status="warn" if seen.short else "ok",
        detail=f"{line} (noise from {noise.source}; tolerance, level and rounds from this contract)",
    )
