"""Does re-judging pay? The judge-resampling lever (`measurement.judge_resamples`) on the sim world.

For each judge share j of the per-seed noise (`sim.judge_noise_share`) and each number of
judge passes k, it measures the SD of one A/A paired round's target statistic through the
product's code path (`World.audit(..., judge_resamples=k)` via `SimRun.audit_pair`, then
`fitness.paired_round_for` with the contract's promotion), with a jackknife-over-worlds SE.
Passes share the audits' keys, so every k sees the same rollouts and only the judge draws
differ. A k-pass audit costs 1 + (k-1) c audits, c = one extra judge pass / one whole audit;
information per unit cost against k = 1 is (sd_1/sd_k)^2 / (1 + (k-1) c), and the lever stops
paying at c = ((sd_1/sd_k)^2 - 1) / (k-1). All figures are SIMULATED: the judge's true share
of the noise is unknown until real A/A audits are re-judged.

    python -m bench.judgepasses                              # default grid: about 30 s on 2 cores
    python -m bench.judgepasses --shares 0 0.5 --passes 1 3 --worlds 4 --pairs 30
    python -m bench.judgepasses --rejudge-cost 0.5 --out bench/results/judge   # judgepasses.md/json
    python -m bench.judgepasses --rejudge-cost bound   # c from the Petri backend's worst-case bound
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from bench.gates import SEED, Setup, load_setup
from bench.simrun import SimRun
from sil.contract.petriparams import PetriParams
from sil.contract.schema import Price, load_contract
from sil.contract.simparams import SimParams
from sil.stats.fitness import paired_round_for
from sil_runtime.sim.world import World

REPO = Path(__file__).resolve().parents[1]
SHARES = (0.0, 0.25, 0.5, 0.75)
PASSES = (1, 2, 3, 5)
DEFAULT_WORLDS, DEFAULT_PAIRS = 20, 100
# The Petri backend prices only a worst case (sil/exec/backends/petri.py worst_case_cost), not an
# expected spend, so the default price of one extra judge pass is an assumption.
ASSUMED_COST = 0.2
BOUND_CONTRACT = REPO / "examples" / "program-petri-offline.md"
READ_PASSES = (2, 3)  # the reading says from which share on these pay
PAYS_Z = 2.0  # "pays" = information ratio above 1 by more than 2 MC SEs
WORLD_OFFSET = 30_000  # world seeds apart from the gate bench's runs and SD worlds


@dataclass(frozen=True)
class PassRow:
    """One (judge share, passes) cell: SD of the A/A target statistic and what k buys."""

    share: float
    passes: int
    sd: float
    sd_se: float
    var_ratio: float  # (sd_1 / sd_k)^2
    var_ratio_se: float
    break_even: float | None  # c at which the lever stops paying; None for k = 1
    info: float  # var_ratio / (1 + (k-1) c)
    info_se: float
    rounds: int  # A/A rounds with a target statistic (coverage met)


@dataclass(frozen=True)
class Cost:
    """Price of one extra judge pass relative to a whole audit, and where it comes from."""

    c: float
    note: str


def break_even(var_ratio: float, passes: int) -> float | None:
    """The c at which k passes give as much information per unit cost as one."""
    return None if passes == 1 else (var_ratio - 1.0) / (passes - 1)


def info_ratio(var_ratio: float, passes: int, c: float) -> float:
    """Information per unit cost of k passes relative to one pass."""
    return var_ratio / (1.0 + (passes - 1) * c)


def share_params(base: SimParams, share: float, world: int) -> SimParams:
    """The contract's sim section with this judge share and world seed (validated)."""
    try:
        return SimParams.model_validate(
            {**base.model_dump(), "judge_noise_share": share, "world_seed": SEED + WORLD_OFFSET + world}
        )
    except ValidationError as ex:
        raise SystemExit(f"judge share {share} is not a valid sim.judge_noise_share: {ex}") from None


def aa_statistics(setup: Setup, share: float, passes: Sequence[int], worlds: int, pairs: int) -> np.ndarray:
    """Target statistic of A/A paired rounds, [len(passes), worlds, pairs]; NaN = coverage not met."""
    target = setup.dims[0]
    out = np.full((len(passes), worlds, pairs), np.nan)
    for w in range(worlds):
        world = World(share_params(setup.params, share, w), setup.dims, setup.n_seeds)
        for i, k in enumerate(passes):
            run = SimRun(world, [], 10**6, "aa", [], judge_resamples=k)  # same name: same keys for all k
            for p in range(pairs):
                a, b = run.audit_pair(run.theta, run.theta)
                diff = paired_round_for(a, b, setup.dims, setup.promotion).diff[target]
                out[i, w, p] = np.nan if diff is None else diff
    return out


def _sds(x: np.ndarray) -> np.ndarray:
    """SD per pass over all worlds and pairs of `x` [passes, worlds, pairs]."""
    flat = x.reshape(x.shape[0], -1)
    return np.nanstd(flat, axis=1, ddof=1)


def _jackknife_se(x: np.ndarray, stat: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Leave-one-world-out SE of `stat(x)`: worlds are the clusters (their seeds differ)."""
    worlds = x.shape[1]
    if worlds < 2:
        return np.full(np.shape(stat(x)), np.nan)
    reps = np.array([stat(np.delete(x, w, axis=1)) for w in range(worlds)])
    se: np.ndarray = np.sqrt((worlds - 1) / worlds * ((reps - reps.mean(axis=0)) ** 2).sum(axis=0))
    return se


def share_rows(x: np.ndarray, share: float, passes: Sequence[int], c: float) -> list[PassRow]:
    """Rows of one judge share from its A/A statistics (passes[0] must be 1)."""

    def ratio(y: np.ndarray) -> np.ndarray:
        sd = _sds(y)
        ratio_sq: np.ndarray = (sd[0] / sd) ** 2
        return ratio_sq

    sd, sd_se = _sds(x), _jackknife_se(x, _sds)
    vr, vr_se = ratio(x), _jackknife_se(x, ratio)
    rows = []
    for i, k in enumerate(passes):
        scale = 1.0 + (k - 1) * c
        rounds = int((~np.isnan(x[i])).sum())
        ratio_k = float(vr[i])
        rows.append(
            PassRow(
                share,
                k,
                float(sd[i]),
                float(sd_se[i]),
                ratio_k,
                float(vr_se[i]),
                break_even=break_even(ratio_k, k),
                info=info_ratio(ratio_k, k, c),
                info_se=float(vr_se[i] / scale),
                rounds=rounds,
            )
        )
    return rows


def bound_cost(contract: Path = BOUND_CONTRACT) -> Cost:
    """c implied by the Petri backend's worst-case cost bound, every role at the same price."""
    from sil.exec.backends.petri import ROLES, worst_case_cost  # imports inspect_ai (seconds): only when asked

    base = load_contract(contract).contract
    price = Price(input_per_mtok=1.0, output_per_mtok=1.0)
    # a paid role must bound its largest call: one token for the auditor's and target's call that
    # crosses the limit, and a judge that can read any transcript, so the ratio is the limit's
    calls = {r: {"context_tokens": 10**9 if r == "judge" else 1, "max_tokens": 1} for r in ROLES}
    models = base.models.model_copy(
        update={r: getattr(base.models, r).model_copy(update={"price": price, **calls[r]}) for r in ROLES}
    )

    def cost(k: int) -> float:
        measurement = base.measurement.model_copy(update={"judge_resamples": k})
        return worst_case_cost(base.model_copy(update={"models": models, "measurement": measurement}), 1, 1)

    c = (cost(2) - cost(1)) / cost(1)
    limit = base.settings(PetriParams).sample_token_limit if base.backend_settings else None
    note = (
        f"from the Petri backend's worst-case bound (every role at one price, token limit {limit}, "
        f"{contract.name}): an upper-end figure, the bound assumes 3 judge attempts reading a full-size transcript"
    )
    return Cost(c, note)


def resolve_cost(value: str | None) -> Cost:
    """--rejudge-cost: None (the stated assumption), a number, or "bound"."""
    if value is None:
        note = "ASSUMED (the Petri backend exposes only a worst-case bound, not an expected cost; see --rejudge-cost bound)"
        return Cost(ASSUMED_COST, note)
    if value == "bound":
        return bound_cost()
    try:
        c = float(value)
    except ValueError:
        raise SystemExit(f"--rejudge-cost expects a number >= 0 or 'bound', got {value!r}") from None
    if not math.isfinite(c) or c < 0:
        raise SystemExit(f"--rejudge-cost must be a finite number >= 0, got {value!r}")
    return Cost(c, "given by --rejudge-cost")


def reading(rows: Sequence[PassRow], cost: Cost) -> str:
    """One line: from which judge share on k = 2 or 3 clearly pays (info - 2 SE > 1) at this c."""
    parts = []
    for k in READ_PASSES:
        by = {r.share: r for r in rows if r.passes == k}
        if not by:
            continue
        shares = sorted(by)
        pays = {s for s in shares if by[s].info - PAYS_Z * by[s].info_se > 1.0}
        # the first share from which every larger share pays too
        start = next((s for s in shares if all(t in pays for t in shares if t >= s)), None)
        if start is None:
            parts.append(f"k = {k} pays at no judge share measured")
        else:
            r = by[start]
            parts.append(f"k = {k} pays from j = {start:g} on (info ratio {r.info:.3f} ± {r.info_se:.3f} there)")
    return f"At c = {cost.c:.2f}: " + "; ".join(parts) + " (SIMULATED; pays = info ratio > 1 by 2 MC SEs)"


def format_rows(rows: Sequence[PassRow], c: float) -> str:
    head = (
        f"| judge share j | passes k | SD of A/A target stat ± SE | var ratio (sd_1/sd_k)² ± SE "
        f"| break-even c | info ratio at c = {c:.2f} ± SE |\n|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        be = "—" if r.break_even is None else f"{r.break_even:.3f}"
        lines.append(
            f"| {r.share:g} | {r.passes} | {r.sd:.4f} ± {r.sd_se:.4f} | {r.var_ratio:.3f} ± {r.var_ratio_se:.3f} "
            f"| {be} | {r.info:.3f} ± {r.info_se:.3f} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shares", type=float, nargs="+", default=list(SHARES), help="judge shares j of the noise")
    ap.add_argument("--passes", type=int, nargs="+", default=list(PASSES), help="judge passes k (1 is always added)")
    ap.add_argument("--worlds", type=int, default=DEFAULT_WORLDS, help="simulated worlds per share")
    ap.add_argument("--pairs", type=int, default=DEFAULT_PAIRS, help="A/A paired rounds per world and k")
    ap.add_argument(
        "--rejudge-cost", help=f"c: an extra judge pass / a whole audit, or 'bound' (default: {ASSUMED_COST}, assumed)"
    )
    ap.add_argument("--contract", type=Path, default=REPO / "program.md", help="sim section and promotion")
    ap.add_argument("--out", type=Path, help="also write <out>/judgepasses.md and judgepasses.json")
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.worlds < 2 or args.pairs < 2:
        raise SystemExit("--worlds and --pairs must be >= 2 (the SE is a jackknife over worlds)")
    if min(args.passes) < 1 or max(args.passes) > 10:
        raise SystemExit("--passes must be in 1..10, like measurement.judge_resamples")
    passes = sorted({1, *args.passes})
    shares = sorted(set(args.shares))
    cost = resolve_cost(args.rejudge_cost)
    setup = load_setup(args.contract, (), with_aux=False)
    for share in shares:
        share_params(setup.params, share, 0)  # a bad share fails before any simulation
    start = time.monotonic()
    rows = [
        r
        for s in shares
        for r in share_rows(aa_statistics(setup, s, passes, args.worlds, args.pairs), s, passes, cost.c)
    ]
    elapsed = time.monotonic() - start
    text = "\n".join(
        [
            f"# Judge resampling (SIMULATED world; {args.worlds} worlds x {args.pairs} A/A pairs per cell, seed {SEED})",
            "",
            f"target: {setup.dims[0]}; seeds per audit: {setup.n_seeds}; contract: {args.contract.name}; "
            f"pair_correlation {setup.params.pair_correlation}",
            f"cost of a k-pass audit: 1 + (k-1) c audits, c = {cost.c:.3f}: {cost.note}",
            "",
            format_rows(rows, cost.c),
            "",
            reading(rows, cost),
            "",
            f"(elapsed {elapsed:.1f} s)",
        ]
    )
    print(text)
    if args.out:
        from bench.metrics import provenance

        used = list(argv) if argv is not None else sys.argv[1:]
        head = provenance(["bench.judgepasses", *used], f"{args.worlds} worlds x {args.pairs} A/A pairs", elapsed)
        first, _, rest = text.partition("\n")
        _write(args.out, f"{first}\n\n{head}{rest}", rows, cost, args)


def _write(folder: Path, text: str, rows: Sequence[PassRow], cost: Cost, args: argparse.Namespace) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "judgepasses.md").write_text(text + "\n", encoding="utf-8")
    data = {
        "simulated": True,
        "seed": SEED,
        "worlds": args.worlds,
        "pairs": args.pairs,
        "cost": asdict(cost),
        "reading": reading(rows, cost),
        "rows": [asdict(r) for r in rows],
    }
    (folder / "judgepasses.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
