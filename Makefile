# make bench   run the whole progression (on a machine without a GPU: print the recorded H200 results)
# make test    run the tests (GPU tests skip cleanly where there is no GPU)
#
# Each target sets itself up. Where the system python already has the dependencies (the H200 machine,
# which reaches no package registry) it is used as it is; elsewhere a virtual environment is made and
# filled from PyPI. CUDA=12 installs CuPy for CUDA 12 instead of 13.
#
# A GPU runner that reaches no package index runs the notebooks with nbval from a folder of wheels:
#   make wheels                      on a connected machine: nbval, ipykernel, nbclient and their
#                                    dependencies for WHEEL_PYTHON (default 3.12) into .whl/ (~17 MB)
#   make test WHEELS=.whl            on the runner: installs them into .nbval-site/ from that folder only
#   make nbval WHEELS=.whl           the notebooks alone under nbval (live on a GPU)
#   make notebooks WHEELS=.whl       every notebook executed, with its outputs, into out/notebooks/

CUDA ?= 13
VENV ?= .venv
# A pip requirement for torch, added before the tests where set (TORCH=torch, a CPU wheel's path, or
# TORCH="torch --index-url https://download.pytorch.org/whl/cpu"): the torch operator's CPU tests then run
# rather than skip. Where it cannot be installed, they skip as without it.
TORCH ?=
BENCH_ARGS ?=
PYTEST_ARGS ?=
NBVAL_ARGS ?=
NB ?=
WHEELS ?=
WHEEL_PYTHON ?= 3.12
NOTEBOOK_PACKAGES := nbval ipykernel nbclient
NB_SITE := .nbval-site

HAVE_DEPS := $(shell python3 -c "import cupy, numpy, ml_dtypes, pytest, cuda.bindings, pynvml" >/dev/null 2>&1 && echo yes)
ifeq ($(HAVE_DEPS),yes)
PY := python3
STAMP :=
else
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-cuda$(CUDA)
endif

# With WHEELS, the notebooks' packages come from that folder into NB_SITE, found through PYTHONPATH.
ifneq ($(WHEELS),)
NB_STAMP := $(NB_SITE)/.installed
NB_ENV := PYTHONPATH="$(CURDIR)/$(NB_SITE)$${PYTHONPATH:+:$$PYTHONPATH}" PATH="$(CURDIR)/$(NB_SITE)/bin:$$PATH"
else
NB_STAMP :=
NB_ENV :=
endif

.PHONY: bench test nbval notebooks lint setup clean wheels

setup: $(STAMP)

$(VENV)/.installed-cuda$(CUDA): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ".[cuda$(CUDA),dev]"
	$(VENV)/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

$(NB_SITE)/.installed:
	$(PY) -m pip install --quiet --no-index --find-links "$(WHEELS)" --target $(NB_SITE) $(NOTEBOOK_PACKAGES)
	touch $@

wheels:
	python3 -m pip download --quiet --only-binary=:all: --python-version $(WHEEL_PYTHON) --implementation cp \
		--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
		-d .whl $(NOTEBOOK_PACKAGES)

bench: $(STAMP)
	$(PY) -m tutorial bench $(BENCH_ARGS)

test: $(STAMP) $(NB_STAMP)
	$(if $(TORCH),-$(PY) -m pip install --quiet $(TORCH))
	$(PY) -m pytest tests lab/tests $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory nbval

# The notebooks under nbval alone: live where there is a GPU (every `if LIVE:` cell runs), else on the records.
nbval: $(STAMP) $(NB_STAMP)
	@if $(NB_ENV) $(PY) -c "import nbval" >/dev/null 2>&1; then \
		$(NB_ENV) $(PY) -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=600 -p no:cacheprovider \
			$(NBVAL_ARGS) notebooks; \
	else echo "nbval is not installed here: notebooks not executed (WHEELS=DIR installs it from wheels)"; fi

notebooks: $(STAMP) $(NB_STAMP)
	$(NB_ENV) $(PY) scripts/execute_notebooks.py --out out/notebooks $(NB)

lint: $(STAMP)
	$(PY) -m ruff check deepgemm tutorial stages tests lab conftest.py

clean:
	rm -rf $(VENV) $(NB_SITE) .pytest_cache
