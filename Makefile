# Strato: `make demo` runs the main job, `make test` runs every test.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: all install browser faketime demo test test-fast lint bench clean chaos chaos-short

all: test

$(BIN)/python:
	@echo "creating the virtualenv $(VENV)"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# pip stays quiet (-q); the line before it says what the wait is for.
# PYTHONWARNINGS: setuptools warns on every editable install that a folder
# named like the package may shadow it; that is this checkout, on purpose.
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "installing strato and its dependencies ('.[dev]') into $(VENV): about a minute, once"
	PYTHONWARNINGS=ignore $(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/strato demo

# The browser test (tests/e2e/test_ui_browser.py) drives Debian's Chromium;
# installed here when missing and this is root on a Debian-like machine.
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium and chromium-driver for the browser test"; \
	    (apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || \
	     (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null)) \
	    || echo "could not install chromium: the browser test will be skipped"; \
	  else echo "no chromium: the browser test will be skipped (apt-get install chromium chromium-driver)"; fi; \
	fi

# The clock tests (tests/e2e/test_zone_clock.py, and the chaos suite's
# skew_cell fault) run a zone under libfaketime; installed here the same way.
faketime:
	@if [ ! -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing libfaketime for the clock tests"; \
	    (apt-get install -y -qq libfaketime >/dev/null 2>&1 || \
	     (apt-get update -qq && apt-get install -y -qq libfaketime >/dev/null)) \
	    || echo "could not install libfaketime: the clock tests will be skipped"; \
	  else echo "no libfaketime: the clock tests will be skipped (apt-get install libfaketime)"; fi; \
	fi

test: $(STAMP) browser faketime
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

# Jepsen-style runs of the zone tree (tests/chaos): real processes, a nemesis
# (kill -9, SIGSTOP, a network partition in a namespace: needs root), then
# every zone's store checked. Exits non-zero on any safety violation.
SEEDS ?= 1-10
DURATION ?= 75
chaos: $(STAMP) faketime
	$(BIN)/python -m tests.chaos.run --seeds $(SEEDS) --duration $(DURATION) $(CHAOS_ARGS)

chaos-short: $(STAMP)
	$(BIN)/python -m pytest -q -s -m chaos tests/chaos $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check strato tests benchmarks
	$(BIN)/mypy

# A few minutes on 2 cores. The full runs (benchmarks/README.md):
#   $(BIN)/python -m benchmarks.candidates --sizes 1000,10000 --peer   (with Placement)
#   $(BIN)/python -m benchmarks.candidates --sizes 100000
#   $(BIN)/python -m benchmarks.claims --sizes 100,100000
# `make bench BENCH_ARGS=--peer` adds real Placement to the candidates run.
BENCH_SIZES ?= 1000,10000
CLAIM_SIZES ?= 100,10000
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python -m benchmarks.claims --sizes $(CLAIM_SIZES) --claims 1000 \
		--out benchmarks/results/claims-latest.json
	$(BIN)/python -m benchmarks.candidates --sizes $(BENCH_SIZES) --requests 100 \
		--json benchmarks/results/candidates-latest.json $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
