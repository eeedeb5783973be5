"""`sil_policy` is its own distribution (`sil-policy`): what a runtime installs, without `sil`."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata

from tests.conftest import REPO

IMPORT_WITHOUT_SIL = (
    "import sys; sys.modules['sil'] = None\n"  # any import of sil (or sil.*) now fails
    "import sil_policy, sil_policy.evidence, sil_policy.files, sil_policy.format\n"
    'print(sil_policy.parse_surface(\'tool_policy\', b\'{"allowed_tools":[],"forbidden_tools":[],"priority_order":[]}\'))'
)


def test_sil_policy_imports_nothing_of_sil() -> None:
    proc = subprocess.run([sys.executable, "-c", IMPORT_WITHOUT_SIL], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr


def test_sil_policy_is_a_distribution_that_sil_and_the_example_runtime_declare() -> None:
    own = tomllib.loads((REPO / "sil_policy" / "pyproject.toml").read_text())
    assert own["project"]["name"] == "sil-policy"
    assert [d.split(">")[0].split("=")[0] for d in own["project"]["dependencies"]] == ["pydantic", "detect-secrets"]
    example = tomllib.loads((REPO / "examples" / "mini_runtime" / "pyproject.toml").read_text())
    assert "sil-policy" in example["project"]["dependencies"]
    assert metadata.version("sil-policy") == own["project"]["version"]
    assert any(r.replace(" ", "").startswith("sil-policy@file:") for r in metadata.requires("sil") or [])
