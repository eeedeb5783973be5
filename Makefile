# Set-up and entry points. `make run` runs the default experiment; `make test` runs the suite.
# Both create .venv with Python 3.12 (found on PATH or under pyenv) and install the project:
# `make run` only what a run needs, `make test` also the test tools (pytest, xdist, ruff, mypy, ray).

PYTHON312 := $(shell for c in python3.12 $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do \
	$$c -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && { echo $$c; break; }; done)
VENV := .venv
# Separate stamps: `make run` installs only what a run needs; `make test` adds the test tools.
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test bench venv

venv: $(TEST_STAMP)

$(VENV)/bin/python:
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found (install it, e.g. 'pyenv install 3.12')" >&2; exit 1; }
	$(PYTHON312) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip

# `pip install -e .` brings sil-policy (sil_policy/, its own distribution) as a copy, the direct
# reference setup.py makes; reinstalled editable, so every process sees an edit of sil_policy/.
$(RUN_STAMP): pyproject.toml setup.py sil_policy/pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q -e .
	$(VENV)/bin/python -m pip install -q --no-deps -e ./sil_policy
	@touch $@

$(TEST_STAMP): pyproject.toml setup.py sil_policy/pyproject.toml $(RUN_STAMP)
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	$(VENV)/bin/python -m pip install -q --no-deps -e ./sil_policy
	@touch $@

run: $(RUN_STAMP)
	$(VENV)/bin/sil run

test: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m pytest

bench: $(TEST_STAMP)
	$(VENV)/bin/python -m bench.gates
