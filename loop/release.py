"""`sil promote`: copy an arm's champion into the runtime's own policy files (explicit, never automatic).

Only if those files are still the run's starting policy; the copy is recorded in the run's
ledger with the run's own offline/simulated flags, and re-read to prove it landed. Keeping
a champion locally is not a merge or a release: the operator commits it.

    message = promote_to_user(run_dir, Path("state/policies"), "gate")
"""

from __future__ import annotations

import stat
from pathlib import Path

from ledger import Ledger, RecordBook
from loop.errors import Refused
from loop.fsutil import atomic_write_bytes
from loop.policystore import PolicyStore, read_policy_dir
from loop.records import IntentRecord, Keys, RunRecord, Trust, UserPromoteRecord
from loop.runstate import RunState
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
    return f"copied the {arm_name} champion {champion.set_id} into {policy_dir} (commit it yourself to release it)"
