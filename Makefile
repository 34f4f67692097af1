# podsweeper: the two commands a newcomer needs are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Two install levels: unit/lint (pure Python) and everything (control plane, containers, bench).
UNIT_STAMP := $(VENV)/.installed-unit
FULL_STAMP := $(VENV)/.installed-full

.PHONY: demo test lint unit bench dev fixtures mutants clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(UNIT_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(UNIT_STAMP)

$(FULL_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[test,integration,bench]'
	touch $(FULL_STAMP) $(UNIT_STAMP)

## The main job on the bundled default: replay the seed's two experiments.
demo: $(UNIT_STAMP)
	$(VENV)/bin/podsweeper replay tests/fixtures/seed-experiment-1.jsonl tests/fixtures/seed-experiment-2.jsonl

## Everything, lint first (fails fast): unit, HTTP, integration (real kube-apiserver),
## e2e (Knative adapter), reliability, deploy, container.
test: $(FULL_STAMP)
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest

## ruff (lint + format check), mypy on the package, import contracts.
lint: $(UNIT_STAMP)
	$(VENV)/bin/ruff check function tests bench
	$(VENV)/bin/ruff format --check function tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

## Fast feedback: no control plane, no Go, no apt, no cryptography.
unit: $(UNIT_STAMP)
	$(PY) -m pytest tests/unit tests/http

bench: $(FULL_STAMP)
	$(PY) -m bench

## A control plane + function + adapter watching namespace `dev`, to try podsweeper by hand.
dev: $(FULL_STAMP)
	$(PY) -m tests.stack --kubeconfig $(CURDIR)/out/dev.kubeconfig --namespace dev

## Seeded bugs, one at a time in a temporary copy: each must be caught (writes docs/mutants.md).
mutants: $(UNIT_STAMP)
	$(PY) -m tests.mutants

fixtures: $(UNIT_STAMP)
	$(PY) -m tests.fixtures.scenarios

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
