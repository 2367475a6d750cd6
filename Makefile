# Everything runs inside a project-local virtualenv that this Makefile creates.
# torch==2.13.0 is installed first, from PyPI unless TORCH_INDEX names another index, e.g.
#   make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu     (the CPU-only build, ~200 MB)
# The package's own requirement is a range that 2.13.0 satisfies, so pip keeps that build.
VENV   ?= .venv
PYTHON ?= python3
TORCH_INDEX ?=
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test test-slow lint typecheck demo docs bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	@echo "== Installing into $(VENV): PyTorch 2.13.0, then imle-solvers with every extra"
	@echo "   (OR-Tools, PuLP, HiGHS, NetworkX, Dask, matplotlib, PyEPO, mkdocs, pytest, ruff, mypy)."
	@echo "   The first time this downloads up to a few GB (PyTorch is most of it) and may take"
	@echo "   2-10 minutes; later runs reuse $(VENV). pip's progress follows."
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install torch==2.13.0 \
		$(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -e '.[all,dev]'
	touch $(STAMP)
	@echo "== Installed."

install: $(STAMP)

lint: install
	$(VENV)/bin/ruff check imle_solvers tests examples scripts
	$(VENV)/bin/ruff format --check imle_solvers tests examples scripts

typecheck: install
	$(VENV)/bin/mypy

test: lint typecheck
	$(VENV)/bin/pytest -q

test-slow: install
	$(VENV)/bin/pytest -q -m slow

demo: install
	@echo "== imle-solvers demo: three training methods on a shortest-path benchmark (10-30 s)"
	$(VENV)/bin/imle-solvers demo --out runs/demo

docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: install
	$(VENV)/bin/imle-solvers bench all

clean:
	rm -rf $(VENV) site .pytest_cache .mypy_cache .ruff_cache build *.egg-info
