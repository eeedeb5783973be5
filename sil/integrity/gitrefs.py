"""Git plumbing for the checkpoint refs, and where they live (no pydantic: `sil runs` reads here).

repo = anchor_repo(root, create=False)     # the project's git repo, else state/anchors.git
Git(repo).resolve("refs/sil/project")
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BARE_REPO = Path("state") / "anchors.git"
NAMESPACE = "sil-ledger"
REF_PREFIX = "refs/sil"
PROJECT_REF = f"{REF_PREFIX}/project"
PROJECT_FILE = "project"
# the files of one checkpoint commit
NOTE_FILE = "checkpoint"
META_FILE = "checkpoint.json"
SIG_FILE = "checkpoint.sig"
GIT_TIMEOUT_S = 60.0
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "sil",
    "GIT_AUTHOR_EMAIL": "sil@localhost",
    "GIT_COMMITTER_NAME": "sil",
    "GIT_COMMITTER_EMAIL": "sil@localhost",
}
# Durable objects and refs: an anchor that a power cut can erase anchors nothing.
GIT_DURABLE = ["-c", "core.fsync=committed", "-c", "core.fsyncMethod=fsync"]


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read (git failure, ledger that does not verify)."""


def checkpoint_ref_of(run_id: str) -> str:
    """The ref of a run's checkpoints (`run_id` already checked: sil/base/runid.py)."""
    return f"{REF_PREFIX}/{run_id}/checkpoints"


def anchor_repo(root: Path, *, create: bool = True) -> Path | None:
    """Where checkpoints live: the project's own git repo, else a tool-owned bare repo.

    Refs under `refs/sil/` in the project repo can be pushed to a protected remote, which
    then witnesses the ledger; the bare repo is the fallback for projects without git.
    """
    root = Path(root)
    if is_git_repo(root):
        return root
    bare = root / BARE_REPO
    if not bare.exists():
        if not create:
            return None
        bare.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "init", "-q", "--bare", str(bare)],
            check=True,
            capture_output=True,
            env=git_env(),
            timeout=GIT_TIMEOUT_S,
        )
    return bare


def is_git_repo(path: Path) -> bool:
    proc = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--git-dir"],
        capture_output=True,
        env=git_env(),
        timeout=GIT_TIMEOUT_S,
        check=False,
    )
    return proc.returncode == 0


def git_env() -> dict[str, str]:
    """The caller's environment without GIT_* variables (a hook's GIT_DIR must not leak in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return {**env, **GIT_IDENTITY}


class Git:
    """Plumbing-only git access (objects and refs under refs/sil), never the index or work tree."""

    def __init__(self, repo_dir: Path, *, check: bool = True) -> None:
        self.repo = Path(repo_dir)
        self.env = git_env()
        if check and self.run("rev-parse", "--git-dir").returncode != 0:
            raise CheckpointError(
                f"{self.repo} is not a git repository: checkpoints are "
                "stored as git refs; run `git init` there or pick the repo"
            )

    def run(
        self, *args: str, data: bytes | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                ["git", *GIT_DURABLE, "-C", str(self.repo), *args],
                input=data,
                capture_output=True,
                env={**self.env, **(env or {})},
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as ex:
            raise CheckpointError(f"git {args[0]} failed: {ex}") from None

    def out(self, *args: str, data: bytes | None = None, env: dict[str, str] | None = None) -> str:
        proc = self.run(*args, data=data, env=env)
        if proc.returncode != 0:
            raise CheckpointError(f"git {args[0]} failed: {proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout.decode().strip()

    def tree(self, files: dict[str, bytes]) -> str:
        """A flat tree of regular files (written as blobs), by name."""
        entries = "".join(f"100644 blob {self.blob(data)}\t{name}\n" for name, data in sorted(files.items()))
        return self.out("mktree", data=entries.encode())

    def commit(self, tree: str, message: str, parents: list[str], date: str | None = None) -> str:
        """`commit-tree`; with a fixed `date` the same inputs always give the same commit id."""
        args = ["commit-tree", "--no-gpg-sign", tree, "-m", message]
        for parent in parents:
            args += ["-p", parent]
        env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date} if date else None
        return self.out(*args, env=env)

    def resolve(self, ref: str) -> str | None:
        proc = self.run("rev-parse", "--verify", "--quiet", ref + "^{commit}")
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    def blob(self, data: bytes) -> str:
        return self.out("hash-object", "-w", "--stdin", data=data)

    def cat_batch(self, names: list[str]) -> list[bytes | None]:
        """Contents of many objects with one `git cat-file --batch` (None when missing)."""
        proc = self.run("cat-file", "--batch", data="".join(n + "\n" for n in names).encode())
        if proc.returncode != 0:
            raise CheckpointError(f"git cat-file failed: {proc.stderr.decode(errors='replace')}")
        out, pos = proc.stdout, 0
        result: list[bytes | None] = []
        for _ in names:
            end = out.index(b"\n", pos)
            header = out[pos:end].split()
            pos = end + 1
            if header[-1] == b"missing" or len(header) != 3:
                result.append(None)
                continue
            size = int(header[2])
            result.append(out[pos : pos + size])
            pos += size + 1
        return result
