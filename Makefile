# The two commands a newcomer needs (see README):
#   make demo   -- set up and run the main job (for now: a short demo of a reversible function)
#   make test   -- set up and run the whole test suite (quick tests, then the slow ones)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test test-quick test-slow lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(PY) -m revbench.demo

test: setup
	$(PY) -m ruff check revbench tests benchmarks
	$(PY) -m pytest
	$(PY) -m pytest -m slow

test-quick: setup
	$(PY) -m pytest

test-slow: setup
	$(PY) -m pytest -m slow

lint: setup
	$(PY) -m ruff check revbench tests benchmarks

bench: setup
	$(PY) benchmarks/bench_core.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
