"""Review actions on a finished run: replicate a past KEEP, promote a champion to the user.

Replication re-audits the kept policy set against the policy it replaced in K fresh paired
rounds (never reusing the audits that led to the KEEP). The KEEP is demoted when the fresh
rounds do not show the target improving, or show a critical dimension worse than its
margin. Promotion copies an arm's champion into `state/policies` only on request, and only
if those files are still the run's starting policy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from pydantic import BaseModel

import fitness
from ledger import Ledger, read_records
from loop.contract import LoadedContract
from loop.fsutil import atomic_write_bytes
from loop.policystore import PolicySet, PolicyStore, read_policy_dir
from loop.records import IntentRecord, RecordBook
from loop.runstate import RunState
from sil_policy import SURFACES

LEVEL = 0.9


class ReplicationError(RuntimeError):
    """The replication cannot run (unknown KEEP, other contract, no budget...)."""


class PromotionError(RuntimeError):
    """The champion cannot be promoted to the user's policy files."""


class ReplicationResult(BaseModel):
    mutation_id: str
    arm: str
    rounds: int
    target: str
    target_interval: tuple[float, float, float] | None
    critical_means: dict[str, float | None]
    demoted: bool
    reason: str
    champion_reverted: bool

    def describe(self) -> str:
        ti = "—" if self.target_interval is None else "{:+.3f} [{:+.3f}, {:+.3f}]".format(*self.target_interval)
        verdict = "DEMOTED" if self.demoted else "holds"
        extra = " (the arm's champion was restored to its parent)" if self.champion_reverted else ""
        return (f"replication of {self.mutation_id} ({self.arm}): {self.rounds} fresh paired rounds; "
                f"Δ{self.target} {ti}; {verdict}: {self.reason}{extra}")


def _find_keep(records, mutation_id: str):
    for rec in records:
        if rec.type == "verdict" and rec.payload["mutation_id"] == mutation_id:
            if rec.payload["verdict"] != "keep":
                raise ReplicationError(f"{mutation_id} was reverted, not kept: nothing to replicate")
            return rec
    raise ReplicationError(f"no verdict for mutation {mutation_id!r} in this run (see `sil ledger show`)")


def replicate(loaded: LoadedContract, root: Path, run_dir: Path, mutation_id: str, k: int,
              approval: str, measurement_hash: str, on_event: Callable[[str], None]) -> ReplicationResult:
    from train import RunConfig, Runner

    state = RunState.load(run_dir)
    if state is None:
        raise ReplicationError(f"{run_dir} has no run state")
    if state.contract_hash != loaded.contract.contract_hash:
        raise ReplicationError("the run was made under another contract; pass that contract with --contract")
    keep = _find_keep(list(read_records(run_dir / "ledger.jsonl")), mutation_id)
    c = loaded.contract
    if state.audits + 2 * k > c.budget.max_audits:
        raise ReplicationError(f"the contract's audit budget has {c.budget.max_audits - state.audits} audits left; "
                               f"{k} rounds need {2 * k}")
    cfg = RunConfig(repo_root=root, run_dir=run_dir, policy_dir=root / "state/policies",
                    approval_id=approval, on_event=on_event)
    runner = Runner(loaded, cfg, measurement_hash)
    cand, parent = _sets(runner.store, keep.payload["candidate_set"], keep.payload["parent_set"])
    rounds = []
    done = len(runner.book.of_type("replicate"))
    for i in range(k):
        label = f"replicate{done:02d}-{mutation_id}-r{i:02d}"  # stable: a re-run reuses finished audits
        stat = runner.paired_round("replicate", label, "replicate", cand, parent, mutation_id)
        runner.round_consumed()
        if stat is not None:
            rounds.append(stat)
    return _conclude(runner, keep.payload["arm"], mutation_id, rounds, done, cand, parent)


def _sets(store: PolicyStore, cand_id: str, parent_id: str) -> tuple[PolicySet, PolicySet]:
    return read_policy_dir(store.sets_dir / cand_id)[0], read_policy_dir(store.sets_dir / parent_id)[0]


def _conclude(runner, arm_name, mutation_id, stored, n_prior, cand, parent) -> ReplicationResult:
    p = runner.promotion
    target = p.target_dimensions[0]
    rounds = list(stored)
    ti = fitness.interval(rounds, target, LEVEL) if rounds else None
    crit = {d: (float(np.mean(v)) if (v := [r.diff[d] for r in rounds if r.diff.get(d) is not None]) else None)
            for d in p.critical_dimensions}
    if ti is None:
        demoted, reason = True, "no usable fresh round: the KEEP is unconfirmed"
    elif ti[0] >= -p.superiority_margin:
        demoted, reason = True, f"fresh rounds show no improvement on {target} (mean {ti[0]:+.3f})"
    elif bad := [d for d, m in crit.items() if m is not None and m > p.critical_margin]:
        demoted, reason = True, f"critical dimensions worse than the {p.critical_margin} margin: {bad}"
    else:
        demoted, reason = False, f"fresh rounds still favour the candidate on {target}"
    reverted = False
    arm = runner.state.arms.get(arm_name)
    if demoted and arm is not None and arm.champion == cand:
        surface = next(s for s in SURFACES if cand.hashes[s] != parent.hashes[s])
        runner.book.once("intent", f"demote:{mutation_id}:{n_prior}", IntentRecord(action="demote", key=mutation_id))
        runner.store.write_surface(arm_name, surface, parent, expect_current=cand.hashes[surface])
        arm.champion = parent
        reverted = True
    result = ReplicationResult(mutation_id=mutation_id, arm=arm_name, rounds=len(rounds), target=target,
                               target_interval=ti, critical_means=crit, demoted=demoted, reason=reason,
                               champion_reverted=reverted)
    runner.book.once("replicate", f"{mutation_id}:{n_prior}", result)
    if demoted:
        runner.book.once("demote", f"{mutation_id}:{n_prior}", {"mutation_id": mutation_id, "reason": reason,
                                                                 "champion_reverted": reverted})
    runner.save()
    return result


def promote_to_user(run_dir: Path, policy_dir: Path, arm_name: str) -> str:
    state = RunState.load(run_dir)
    if state is None or arm_name not in state.arms:
        raise PromotionError(f"no arm {arm_name!r} in {run_dir.name}")
    champion = state.arms[arm_name].champion
    current, _ = read_policy_dir(policy_dir)
    if current == champion:
        return f"{policy_dir} already holds the {arm_name} champion {champion.set_id}"
    if current != state.origin:
        raise PromotionError(f"{policy_dir} changed since the run started (set {current.set_id}, run started "
                             f"from {state.origin.set_id}); review it by hand, nothing was copied")
    store = PolicyStore(run_dir)
    book = RecordBook(Ledger(run_dir / "ledger.jsonl"), state.run_id)
    book.once("intent", f"user-promote:{champion.set_id}", IntentRecord(action="promote", key=champion.set_id,
              detail={"to": str(policy_dir), "arm": arm_name}))
    for name, spec in SURFACES.items():
        if current.hashes[name] != champion.hashes[name]:
            atomic_write_bytes(policy_dir / spec.filename, (store.set_dir(champion) / spec.filename).read_bytes())
    if read_policy_dir(policy_dir)[0] != champion:
        raise PromotionError("the copied files do not match the champion; check the disk")
    book.once("promote", f"user:{champion.set_id}", {"arm": arm_name, "policy_set": champion.set_id,
                                                      "to": str(policy_dir), "by": "operator"})
    return f"copied the {arm_name} champion {champion.set_id} into {policy_dir} (commit it yourself to release it)"
