# The two commands: `make demo` and `make test`. Both create the virtual
# environment on first use; nothing else needs to be installed by hand
# (the Pub/Sub emulator comes from the Google Cloud SDK on the machine).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test demo up lint format bench chaos clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,adk,tracing]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

demo: $(STAMP)
	$(BIN)/agent-memory demo

up: $(STAMP)
	$(BIN)/agent-memory up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python bench/pipeline.py

# Faults injected into a running `agent-memory up` (bench/chaos.py); ARGS="--only NAME".
chaos: $(STAMP)
	$(BIN)/python bench/chaos.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
