"""Policy history in tool-owned git refs: every candidate, kept or reverted, stays reachable.

After each verdict the candidate's whole policy set (the seven files, byte for byte as stored
under `state/runs/<run>/sets/<set_id>/`) becomes a git commit whose parent is the commit of
the champion it was derived from, and two refs are set with git plumbing only:

    refs/sil/<run>/origin                      the starting policy set
    refs/sil/<run>/candidates/<arm>/<mutation_id>   every candidate, whatever its verdict
    refs/sil/<run>/arms/<arm>/champion         the arm's current champion

so `git log refs/sil/<run>/arms/gate/champion` is the chain of KEEPs back to the origin.
Commit dates come from the ledger records, so re-running a step after a crash produces the
same commit ids and the ref updates are idempotent. The user's branch, HEAD, index and work
tree are never touched; promoting a champion to the user's files is the explicit
`sil promote RUN --arm <arm>`.

    refs = PolicyRefs(anchor_repo(root), run_id, store)
    commit = refs.record_candidate("gate", mutation_id, candidate, parent_commit, message, ts)
    run_refs = RunRefs(repo, run_id, store)      # what the loop uses: lazy, and halts on failure
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from sil.base.errors import Halt
from sil.integrity.checkpoint import REF_PREFIX, CheckpointError, GitPlumbing
from sil.integrity.ledger import check_run_id
from sil.policies.store import PolicySet, PolicyStore
from sil_policy import SURFACES


class PolicyRefError(RuntimeError):
    """A policy ref cannot be written, or was moved by something other than this run."""


def origin_ref(run_id: str) -> str:
    return f"{REF_PREFIX}/{check_run_id(run_id)}/origin"


def candidate_ref(run_id: str, arm: str, mutation_id: str) -> str:
    return f"{REF_PREFIX}/{check_run_id(run_id)}/candidates/{arm}/{mutation_id}"


def champion_ref(run_id: str, arm: str) -> str:
    return f"{REF_PREFIX}/{check_run_id(run_id)}/arms/{arm}/champion"


def git_date(iso_ts: str) -> str:
    """A ledger timestamp as a git date (`<unix seconds> +0000`)."""
    return f"{int(datetime.fromisoformat(iso_ts).timestamp())} +0000"


class PolicyRefs:
    """Commits of stored policy sets and the run's refs to them."""

    def __init__(self, repo: Path, run_id: str, store: PolicyStore) -> None:
        try:
            self.git = GitPlumbing(repo)
        except CheckpointError as ex:
            raise PolicyRefError(str(ex)) from None
        self.run_id = run_id
        self.store = store

    def origin(self, policy_set: PolicySet, ts: str) -> str:
        """The origin set's commit (no parent), created once."""
        message = f"sil {self.run_id}: origin policy set {policy_set.set_id}\n\nPolicy-Set: {policy_set.set_id}\n"
        commit = self._commit(policy_set, message, [], ts)
        self._set_ref(origin_ref(self.run_id), commit, expect=None)
        return commit

    def record_candidate(
        self, arm: str, mutation_id: str, candidate: PolicySet, parent_commit: str, summary: str, ts: str
    ) -> str:
        """The candidate's commit on top of its parent champion's; ref `candidates/<arm>/<id>`."""
        message = f"sil {self.run_id} {arm}: {summary}\n\nMutation: {mutation_id}\nPolicy-Set: {candidate.set_id}\n"
        commit = self._commit(candidate, message, [parent_commit], ts)
        self._set_ref(candidate_ref(self.run_id, arm, mutation_id), commit, expect=None)
        return commit

    def set_champion(self, arm: str, commit: str, previous: str | None) -> None:
        """Move `arms/<arm>/champion` from `previous` (None: not yet set) to `commit`."""
        self._set_ref(champion_ref(self.run_id, arm), commit, expect=previous)

    def read_set(self, ref: str) -> dict[str, bytes]:
        """The policy files a ref points to, by file name (for checks and reviews)."""
        names = [f"{ref}:{spec.filename}" for spec in SURFACES.values()]
        blobs = self.git.cat_batch(names)
        return {spec.filename: b for spec, b in zip(SURFACES.values(), blobs, strict=True) if b is not None}

    def _commit(self, policy_set: PolicySet, message: str, parents: list[str], ts: str) -> str:
        self.store.check_set(policy_set)  # the commit must hold exactly the audited bytes
        folder = self.store.set_dir(policy_set)
        files = {spec.filename: (folder / spec.filename).read_bytes() for spec in SURFACES.values()}
        try:
            return self.git.commit(self.git.tree(files), message, parents, git_date(ts))
        except CheckpointError as ex:
            raise PolicyRefError(f"cannot store policy set {policy_set.set_id} in git: {ex}") from None

    def _set_ref(self, ref: str, commit: str, expect: str | None) -> None:
        """Compare-and-swap that is a no-op when the ref already holds `commit`."""
        current = self.git.resolve(ref)
        if current == commit:
            return
        if current != expect:
            raise PolicyRefError(
                f"{ref} points to {current}, expected {expect or 'nothing'}: "
                "something other than this run moved it; inspect it and resume"
            )
        try:
            self.git.update_ref(ref, commit, expect)
        except CheckpointError as ex:
            raise PolicyRefError(f"cannot update {ref}: {ex}") from None


class RunRefs:
    """The run's view of its policy refs: created on first use, and a failure halts the run.

    Without a repository (`repo` None) nothing is recorded and every commit is None.
    """

    def __init__(self, repo: Path | None, run_id: str, store: PolicyStore) -> None:
        self.repo = repo
        self.run_id = run_id
        self.store = store
        self._refs: PolicyRefs | None = None

    def _git(self) -> PolicyRefs:
        if self._refs is None:
            assert self.repo is not None
            self._refs = PolicyRefs(self.repo, self.run_id, self.store)
        return self._refs

    def record_verdict(
        self,
        arm: str,
        mutation_id: str,
        candidate: PolicySet,
        origin: PolicySet,
        champion_commit: str | None,
        keep: bool,
        summary: str,
        times: tuple[str, str],
    ) -> tuple[str | None, str | None]:
        """Commit the candidate (kept or not) and move the arm's champion ref on a KEEP.

        `times` are the ledger timestamps of the run record and of the verdict, so a repeat
        after a crash makes the same commits. Returns (candidate commit, champion commit).
        """
        if self.repo is None:
            return None, champion_commit
        try:
            git = self._git()
            parent = champion_commit or git.origin(origin, times[0])
            commit = git.record_candidate(arm, mutation_id, candidate, parent, summary, times[1])
            champion = commit if keep else parent
            git.set_champion(arm, champion, previous=champion_commit)
        except PolicyRefError as ex:
            raise Halt(f"cannot keep the candidate reachable in git: {ex}") from None
        return commit, champion

    def move_champion(self, arm: str, commit: str, previous: str | None) -> None:
        """Point the arm's champion ref at `commit` (e.g. the origin after a roll-back)."""
        if self.repo is None:
            return
        try:
            self._git().set_champion(arm, commit, previous=previous)
        except PolicyRefError as ex:
            raise Halt(f"cannot move the {arm} champion ref: {ex}") from None

    def origin_commit(self, origin: PolicySet, ts: str) -> str | None:
        if self.repo is None:
            return None
        try:
            return self._git().origin(origin, ts)
        except PolicyRefError as ex:
            raise Halt(f"cannot record the origin policy in git: {ex}") from None
