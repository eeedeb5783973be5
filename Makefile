# Set-up and entry points. `make run` runs the default experiment; `make test` runs the suite.
# Both create .venv with Python 3.12 (found on PATH or under pyenv) and install the project.

PYTHON312 := $(shell for c in python3.12 $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do \
	$$c -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && { echo $$c; break; }; done)
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test bench venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found (install it, e.g. 'pyenv install 3.12')" >&2; exit 1; }
	@test -x $(VENV)/bin/python || $(PYTHON312) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/sil run

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m pytest

bench: $(STAMP)
	$(VENV)/bin/python -m bench.gates
