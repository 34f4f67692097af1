# podsweeper: the two commands a newcomer needs are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test unit bench dev fixtures clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

## The main job on the bundled default: replay the seed's two experiments.
demo: $(STAMP)
	$(VENV)/bin/podsweeper replay tests/fixtures/seed-experiment-1.jsonl tests/fixtures/seed-experiment-2.jsonl

## Everything: unit, HTTP, integration (real kube-apiserver), e2e (Knative adapter), container.
test: $(STAMP)
	$(PY) -m pytest

## Fast feedback: no control plane, no builds.
unit: $(STAMP)
	$(PY) -m pytest tests/unit tests/http

bench: $(STAMP)
	$(PY) -m bench

## A control plane + function + adapter watching namespace `dev`, to try podsweeper by hand.
dev: $(STAMP)
	$(PY) -m tests.stack --kubeconfig $(CURDIR)/out/dev.kubeconfig --namespace dev

fixtures: $(STAMP)
	$(PY) -m tests.fixtures.scenarios

clean:
	rm -rf $(VENV) out .pytest_cache
