# The two commands a newcomer needs (see README):
#   make lab    -- set up and open the workbench: JupyterLab on the tour notebook
#   make test   -- set up and run the whole test suite (lint, quick tests, then the slow ones)
# and for a teacher:
#   make site   -- the course website in site/: each lesson run and exported to HTML, its
#                  debuggers still stepping without a kernel (open site/index.html)
PYTHON ?= python3
# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE, set
# in some containers): the tests start many fresh Python processes (documentation examples,
# second processes loading the cache), and pytest rewrites every test module's asserts in
# each worker; without cached bytecode each does it again, about 40 s of the quick suite.
unexport PYTHONDONTWRITEBYTECODE
VENV ?= .venv
PY := $(VENV)/bin/python
TOUR := notebooks/01_tour.ipynb
# Jupyter refuses to run as root unless told; containers often are root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: setup setup-test lab demo site test test-quick test-slow lint bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# The workbench: revbench with the notebook extra (JupyterLab, ipywidgets, the kernel).
$(VENV)/.installed-notebook: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[notebook]'
	touch $@

# Everything the tests use: the notebook extra plus pytest, nbclient, playwright ...
$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

# The course website's builder: the notebook extra plus nbclient and nbconvert.
$(VENV)/.installed-site: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[site]'
	touch $@

setup: $(VENV)/.installed-notebook

setup-test: $(VENV)/.installed-test

# JUPYTER_PREFER_ENV_PATH: the venv's python3 kernel wins over one in the user's own
# Jupyter folders, so the notebook runs with this revbench.  JupyterLab serves the
# repository's root (the notebooks link to docs/) and opens on the tour; default_url makes
# the address it prints (to open by hand) the tour's too.
lab: setup
	JUPYTER_PREFER_ENV_PATH=1 $(VENV)/bin/jupyter lab $(ALLOW_ROOT) \
		--ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/$(TOUR)

# A quick look without a browser: forward and inverse runs, and a gradient, in the terminal.
demo: setup
	$(PY) -m revbench.demo

# The course website: every lesson notebook executed (REVBENCH_STATIC_DEBUGGER=1: each
# debugger also carries its static page) and exported with nbconvert, plus an index page.
SITE ?= site
site: $(VENV)/.installed-site
	JUPYTER_PREFER_ENV_PATH=1 $(PY) -m revbench.course.site $(SITE)

test: setup-test
	$(PY) -m ruff check revbench tests benchmarks
	$(PY) -m pytest
	$(PY) -m pytest -m slow

test-quick: setup-test
	$(PY) -m pytest

test-slow: setup-test
	$(PY) -m pytest -m slow

lint: setup-test
	$(PY) -m ruff check revbench tests benchmarks

bench: setup
	$(PY) benchmarks/bench_core.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info site
