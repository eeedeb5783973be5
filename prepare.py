"""prepare — the frozen measurement: seed library and rubric, with a manifest of their hashes.

A candidate never changes it: changing the measurement is changing the measurement, not the
system under test. The code lives in `sil/contract/prepare.py`; this file is its entry point.

    python prepare.py            # verify measurement/ against its manifest
    python prepare.py --write    # re-hash after a deliberate change of the measurement
"""

import sys

from sil.contract.prepare import (
    Dimension,
    Manifest,
    MeasurementError,
    Seed,
    build_manifest,
    load_heldout,
    load_rubric,
    load_seeds,
    main,
    verify,
)

__all__ = [
    "Dimension",
    "Manifest",
    "MeasurementError",
    "Seed",
    "build_manifest",
    "load_heldout",
    "load_rubric",
    "load_seeds",
    "verify",
]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
