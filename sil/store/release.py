"""`sil promote`: copy an arm's champion into the runtime's own policy files (explicit, never automatic).

Only if those files are still the run's starting policy; the copy is recorded in the run's
ledger with the run's own offline/simulated flags, and re-read to prove it landed. Keeping
a champion locally is not a merge or a release: the operator commits it.

    problems = promotion_risks(run_dir, "gate")        # refuse unless --force when non-empty
    print(champion_diff(run_dir, Path("state/policies"), "gate"))
    message = promote_to_user(run_dir, Path("state/policies"), "gate")
"""

from __future__ import annotations

import difflib
import stat
from pathlib import Path

from sil.base.errors import Refused
from sil.base.fsutil import atomic_write_bytes
from sil.integrity.ledger import Ledger, RecordBook, read_records
from sil.integrity.records import IntentRecord, Keys, RunRecord, Trust, UserPromoteRecord, canary_halt
from sil.policies.store import PolicyStore, read_policy_dir
from sil.store.champion import champion_status
from sil.store.runstate import RunState
from sil_policy import SURFACES


def check_plain_target(policy_dir: Path) -> None:
    """Refuse a policy folder reached through a symlink, or a target that is not a regular file."""
    policy_dir = Path(policy_dir)
    if not policy_dir.is_dir() or policy_dir.is_symlink() or policy_dir.parent.is_symlink():
        raise Refused(
            f"{policy_dir} is not a plain directory (missing, or reached through a symlink); "
            "promote writes only into a real state/policies folder inside the project. Nothing was copied"
        )
    for spec in SURFACES.values():
        target = policy_dir / spec.filename
        if target.is_symlink() or (target.exists() and not stat.S_ISREG(target.lstat().st_mode)):
            raise Refused(f"{target} is not a regular file (symlink, directory or device); nothing was copied")


def promote_to_user(run_dir: Path, policy_dir: Path, arm_name: str, trust: Trust | None = None) -> str:
    check_plain_target(policy_dir)
    state = RunState.load(run_dir)
    if state is None or arm_name not in state.arms:
        raise Refused(f"no arm {arm_name!r} in {run_dir.name}")
    champion = state.arms[arm_name].champion
    current, _ = read_policy_dir(policy_dir)
    status = champion_status(state, list(read_records(run_dir / "ledger.jsonl")), arm_name)
    if status.standing == "rolled_back":
        raise Refused(f"the {arm_name} champion was {status.words}; there is nothing to promote")
    if current == champion:
        return f"{policy_dir} already holds the {arm_name} champion {champion.set_id}"
    if current != state.origin:
        raise Refused(
            f"{policy_dir} changed since the run started (set {current.set_id}, run started "
            f"from {state.origin.set_id}); review it by hand, nothing was copied"
        )
    store = PolicyStore(run_dir)
    book = RecordBook(Ledger.existing(run_dir / "ledger.jsonl"), state.run_id)
    trust = trust or Trust()
    declared = book.get("contract", Keys.RUN, RunRecord)
    if declared is not None and (why := declared.trust.mismatch(trust)):
        raise Refused(f"run {state.run_id}: {why}; nothing was copied")
    key = Keys.user_promote(champion.set_id)
    if not book.has("user_promote", key):
        book.open_segment(f"promote {arm_name} {champion.set_id}", trust)
    book.once(Keys.intent("promote", key), IntentRecord(action="promote", key=key, arm=arm_name, to=str(policy_dir)))
    for name, spec in SURFACES.items():
        if current.hashes[name] != champion.hashes[name]:
            atomic_write_bytes(policy_dir / spec.filename, (store.set_dir(champion) / spec.filename).read_bytes())
    if read_policy_dir(policy_dir)[0] != champion:
        raise Refused("the copied files do not match the champion; check the disk")
    book.once(key, UserPromoteRecord(arm=arm_name, policy_set=champion.set_id, to=str(policy_dir)))
    return (
        f"copied the {arm_name} champion {champion.set_id} into {policy_dir}; release it with: "
        f"git add {policy_dir} && git commit -m 'Promote {arm_name} champion {champion.set_id} of run {state.run_id}'"
    )


CONTROL_ARMS = {
    "never": "the never arm is the unchanged control: it has no champion of its own to promote",
    "random": (
        "the random arm is the coin-flip negative control: its champion was chosen by coin flips, not by the "
        "search's evidence, even when it was then certified against the start (promote the gate's champion, "
        "the search's result)"
    ),
}


def promotion_risks(run_dir: Path, arm_name: str) -> list[str]:
    """Why promoting this arm's champion is risky; empty when it is a certified gate champion."""
    state = RunState.load(run_dir)
    if state is None or arm_name not in state.arms:
        raise Refused(f"no arm {arm_name!r} in {run_dir.name}")
    risks = [CONTROL_ARMS[arm_name]] if arm_name in CONTROL_ARMS else []
    records = list(read_records(run_dir / "ledger.jsonl"))
    if why := canary_halt(records):
        risks.append(f"{why}; the champion's comparisons are not trustworthy")
    status = champion_status(state, records, arm_name)
    if status.standing == "rolled_back":
        raise Refused(f"the {arm_name} champion was {status.words}; there is nothing to promote")
    if not status.changed:
        return risks
    if status.standing != "certified":
        risks.append(f"champion {status.set_id}: {status.words}")
    return risks


def champion_diff(run_dir: Path, policy_dir: Path, arm_name: str) -> str:
    """Unified diff from the current policy files to the arm's champion (Refused if a target is unsafe)."""
    check_plain_target(policy_dir)
    state = RunState.load(run_dir)
    if state is None or arm_name not in state.arms:
        raise Refused(f"no arm {arm_name!r} in {run_dir.name}")
    folder = PolicyStore(run_dir).set_dir(state.arms[arm_name].champion)
    lines: list[str] = []
    for spec in SURFACES.values():
        cur = policy_dir / spec.filename
        old = cur.read_text(encoding="utf-8").splitlines() if cur.exists() else []
        new = (folder / spec.filename).read_text(encoding="utf-8").splitlines()
        lines += difflib.unified_diff(
            old, new, f"{policy_dir}/{spec.filename}", f"champion/{spec.filename}", lineterm=""
        )
    return "\n".join(lines)
