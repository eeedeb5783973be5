"""What pyproject.toml cannot say: `sil` depends on `sil-policy` from this checkout.

`sil_policy/` is its own small distribution (the one a runtime author installs); a direct
reference to it needs an absolute URL, so it is made here. Every other dependency is the list
`[tool.sil] dependencies` in pyproject.toml.
"""

import tomllib
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
PINS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["sil"]["dependencies"]

setup(install_requires=[*PINS, f"sil-policy @ {(ROOT / 'sil_policy').as_uri()}"])
