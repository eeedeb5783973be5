"""train — the fixed-budget loop: preflight, baseline, the never / random / gate arms, certification.

The loop lives in `sil/run/` (the phase sequencer is `sil/run/train.py`); `sil run` is the
command people use. This file is the design card's entry point and accepts the same options.

    python train.py --contract program.md
"""

import sys

from sil.run.train import RunConfig, execute_run, main, open_run, run_phases

__all__ = ["RunConfig", "execute_run", "open_run", "run_phases"]

if __name__ == "__main__":
    sys.exit(main())
