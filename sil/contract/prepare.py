"""The frozen measurement: seed library and rubric, with a manifest of their hashes.

The seed library is a directory of Petri-format `.md` seeds (front matter + instruction;
id = file stem). An optional `heldout/` directory, in the same format, holds the held-out
confirmation seeds: never shown to the mutator and never used by the search, only by the final
certification (a measurement without it hashes exactly as before). The rubric is a directory of dimension files (front matter: description,
palette good-low/good-high for direction, tier critical/auxiliary/info; body = scoring
guide). `MANIFEST.json` lists a SHA-256 per file and one overall hash. The loop verifies the
manifest before and after every audit and halts on any difference: changing the measurement
is changing the measurement, never a candidate.

    python prepare.py            # verify measurement/ against its manifest
    python prepare.py --write    # (re)write the manifest: a new measurement epoch
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

MEASUREMENT_DIR = Path(__file__).resolve().parents[2] / "measurement"
MANIFEST_NAME = "MANIFEST.json"
PARTS = ("seeds", "rubric")
# Shipped with the measurement when present: the judge-drift canary's stored transcripts and
# the held-out confirmation seeds. Absent parts add nothing to the manifest (hash compatible).
OPTIONAL_PARTS = ("canary", "heldout")
SeedSet = Literal["search", "heldout"]
# which folder of the measurement holds each seed set
SEED_FOLDERS: dict[str, str] = {"search": "seeds", "heldout": "heldout"}
SEED_SET_NAMES: dict[str, str] = {"search": "search", "heldout": "held-out"}  # as the views write them
Tier = Literal["critical", "auxiliary", "info"]
Direction = Literal["lower_is_better", "higher_is_better", "neutral"]
_PALETTE_DIRECTION: dict[str, Direction] = {
    "good-low": "lower_is_better",
    "good-high": "higher_is_better",
    "neutral": "neutral",
}


class MeasurementError(RuntimeError):
    """The seed library or rubric is unreadable or differs from its manifest."""


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    files: dict[str, str]
    manifest_hash: str


@dataclass(frozen=True)
class Seed:
    id: str
    tags: tuple[str, ...]
    instruction: str


@dataclass(frozen=True)
class Dimension:
    name: str
    description: str
    tier: Tier
    direction: Direction
    guide: str


MAX_MEASUREMENT_FILE_BYTES = 1_000_000  # the largest shipped seed is a few KB


def _files(root: Path) -> list[Path]:
    out = []
    for part in PARTS + tuple(p for p in OPTIONAL_PARTS if (root / p).is_dir()):
        folder = root / part
        if not folder.is_dir():
            raise MeasurementError(f"missing folder {folder}: the seed library needs seeds/ and rubric/")
        for path in sorted(folder.iterdir()):
            if path.is_symlink() or not path.is_file() or path.suffix != ".md":
                raise MeasurementError(f"unexpected entry {path}: {part}/ holds only regular .md files")
            _check_size(path)
            out.append(path)
    return out


def build_manifest(root: Path = MEASUREMENT_DIR) -> Manifest:
    files = {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in _files(root)}
    overall = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return Manifest(files=files, manifest_hash=overall)


def write_manifest(root: Path = MEASUREMENT_DIR) -> Manifest:
    manifest = build_manifest(root)
    tmp = root / (MANIFEST_NAME + ".tmp")
    tmp.write_text(manifest.model_dump_json(indent=2) + "\n")
    tmp.replace(root / MANIFEST_NAME)
    return manifest


def read_manifest(root: Path = MEASUREMENT_DIR) -> Manifest:
    path = root / MANIFEST_NAME
    if not root.is_dir():
        raise MeasurementError(
            f"seed library folder {root} does not exist: check measurement.seed_library in the contract "
            "(a path relative to the project root); nothing needs re-freezing"
        )
    try:
        return Manifest.model_validate_json(path.read_text())
    except OSError:
        raise MeasurementError(f"no manifest at {path}: run `python prepare.py --write` once") from None
    except ValueError as ex:
        raise MeasurementError(f"manifest {path} is corrupt: {ex}") from None


def verify(root: Path = MEASUREMENT_DIR, expected_hash: str | None = None) -> Manifest:
    """Check every file against the manifest (and the manifest against the contract)."""
    stored = read_manifest(root)
    actual = build_manifest(root)
    if actual.files != stored.files:
        changed = sorted(
            k for k in stored.files.keys() | actual.files.keys() if stored.files.get(k) != actual.files.get(k)
        )
        raise MeasurementError(f"measurement changed since its manifest: {', '.join(changed)}")
    if actual.manifest_hash != stored.manifest_hash:
        raise MeasurementError("manifest hash does not match its file list")
    if expected_hash is not None and actual.manifest_hash != expected_hash:
        raise MeasurementError(
            f"measurement hash {actual.manifest_hash[:12]} differs from the contract's "
            f"{expected_hash[:12]}: a new measurement needs a new contract"
        )
    return actual


def _check_size(path: Path) -> None:
    """A seed, rubric or canary file is a page of text; a huge one would stall every reader of it."""
    size = path.stat().st_size
    if size > MAX_MEASUREMENT_FILE_BYTES:
        raise MeasurementError(
            f"{path} has {size} bytes; a measurement file may have at most {MAX_MEASUREMENT_FILE_BYTES}: "
            "shorten it or split it into several seeds"
        )


def _front_matter(path: Path) -> tuple[dict[str, Any], str]:
    _check_size(path)
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        raise MeasurementError(f"{path} must start with YAML front matter ('---')")
    head, sep, body = text[4:].partition("\n---\n")
    if not sep:
        raise MeasurementError(f"{path}: front matter is not closed")
    import yaml  # here, not at import: reading a run (records name a SeedSet) parses no YAML

    try:
        meta = copy.deepcopy(_parsed_head(head))
    except (yaml.YAMLError, ValueError) as ex:
        raise MeasurementError(f"{path}: front matter is not valid YAML: {ex}") from None
    if not isinstance(meta, dict):
        raise MeasurementError(f"{path}: front matter must be a mapping")
    return meta, body.strip()


@functools.lru_cache(maxsize=1024)
def _parsed_head(head: str) -> Any:
    """A front matter's YAML, parsed once per text: a run reads the same seed files at every
    measurement context it opens, and parsing them was a tenth of a simulated run's CPU."""
    from sil.base.yamlstrict import load_strict

    return load_strict(head) or {}


def load_seeds(root: Path = MEASUREMENT_DIR, seed_set: SeedSet = "search") -> list[Seed]:
    """The seeds of one set: the search seeds (`seeds/`) or the held-out ones (`heldout/`)."""
    folder = root / SEED_FOLDERS[seed_set]
    seeds = []
    for path in sorted(folder.glob("*.md")):
        meta, body = _front_matter(path)
        seeds.append(Seed(path.stem, tuple(meta.get("tags", [])), body))
    if not seeds:
        raise MeasurementError(f"no seeds in {folder}")
    return seeds


def load_heldout(root: Path = MEASUREMENT_DIR) -> list[Seed]:
    """The held-out seeds (none when the measurement has no `heldout/`); ids never repeat a search seed's."""
    if not (root / SEED_FOLDERS["heldout"]).is_dir():
        return []
    heldout = load_seeds(root, "heldout")
    shared = sorted({s.id for s in heldout} & {s.id for s in load_seeds(root)})
    if shared:
        raise MeasurementError(
            f"held-out seeds {shared} have the id of a search seed: rename them in {root / 'heldout'} "
            "(a held-out seed must be a different scenario), then re-freeze with `python prepare.py --write`"
        )
    return heldout


def load_rubric(root: Path = MEASUREMENT_DIR) -> list[Dimension]:
    dims = []
    for path in sorted((root / "rubric").glob("*.md")):
        meta, body = _front_matter(path)
        palette = meta.get("palette", "good-low")
        tier = meta.get("tier")
        if palette not in _PALETTE_DIRECTION or tier not in ("critical", "auxiliary", "info"):
            raise MeasurementError(f"{path}: needs palette good-low|good-high|neutral and tier critical|auxiliary|info")
        dims.append(Dimension(path.stem, str(meta.get("description", "")), tier, _PALETTE_DIRECTION[palette], body))
    if not dims:
        raise MeasurementError(f"no dimensions in {root / 'rubric'}")
    return dims


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python prepare.py",
        description="Verify the frozen seed library and rubric against their manifest (or re-freeze them).",
    )
    ap.add_argument(
        "--write",
        action="store_true",
        help="re-freeze: write a new MANIFEST.json (a new measurement, so a new contract manifest_hash)",
    )
    args = ap.parse_args(argv)  # an unknown option exits 2 with usage
    root = MEASUREMENT_DIR
    if args.write:
        m = write_manifest(root)
        print(f"wrote {root / MANIFEST_NAME}: {len(m.files)} files, hash {m.manifest_hash}")
        return 0
    try:
        m = verify(root)
    except MeasurementError as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 1
    try:
        heldout = len(load_heldout(root))
    except MeasurementError as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 1
    print(
        f"ok: {len(load_seeds(root))} search seeds, {heldout} held-out seeds, "
        f"{len(load_rubric(root))} dimensions, hash {m.manifest_hash}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
