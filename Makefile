# Everything runs inside a project-local virtualenv that this Makefile creates.
# torch==2.13.0 is installed first (a CPU wheel on the build machines); the package's own
# requirement is a range that 2.13.0 satisfies, so pip never pulls a CUDA build.
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test test-slow lint typecheck demo docs bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(VENV)/bin/ruff check imle_solvers tests examples

typecheck: install
	$(VENV)/bin/mypy

test: lint typecheck
	$(VENV)/bin/pytest -q

test-slow: install
	$(VENV)/bin/pytest -q -m slow

demo: install
	$(VENV)/bin/imle-solvers demo

docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: install
	$(VENV)/bin/imle-solvers bench all

clean:
	rm -rf $(VENV) site .pytest_cache .mypy_cache .ruff_cache build *.egg-info
