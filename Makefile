# make bench   run the whole progression (on a machine without a GPU: print the recorded H200 results)
# make test    run the tests (GPU tests skip cleanly where there is no GPU)
#
# Each target sets itself up. Where the system python already has the dependencies (the H200 machine,
# which reaches no package registry) it is used as it is; elsewhere a virtual environment is made and
# filled from PyPI. CUDA=12 installs CuPy for CUDA 12 instead of 13.

CUDA ?= 13
VENV ?= .venv
BENCH_ARGS ?=
PYTEST_ARGS ?=

HAVE_DEPS := $(shell python3 -c "import cupy, numpy, ml_dtypes, pytest, cuda.bindings, pynvml" >/dev/null 2>&1 && echo yes)
ifeq ($(HAVE_DEPS),yes)
PY := python3
STAMP :=
else
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-cuda$(CUDA)
endif

.PHONY: bench test lint setup clean

setup: $(STAMP)

$(VENV)/.installed-cuda$(CUDA): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ".[cuda$(CUDA),dev]"
	$(VENV)/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

bench: $(STAMP)
	$(PY) -m deepgemm bench $(BENCH_ARGS)

test: $(STAMP)
	$(PY) -m pytest tests lab/tests $(PYTEST_ARGS)
	@if $(PY) -c "import nbval" >/dev/null 2>&1; then \
		$(PY) -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=600 -p no:cacheprovider notebooks; \
	else echo "nbval is not installed here: notebooks not executed"; fi

lint: $(STAMP)
	$(PY) -m ruff check deepgemm stages tests lab conftest.py

clean:
	rm -rf $(VENV) .pytest_cache
