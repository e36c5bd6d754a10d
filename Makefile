# `make run` and `make test` do all of the set-up themselves on a fresh Debian machine with Python 3.11.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUNTIME := $(VENV)/.runtime

.PHONY: run test lint bench bench-smoke screenshots vendor clean java postgresql

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# The runtime alone (`make run`: a quick first start); tests and benchmarks add the extras.
$(RUNTIME): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $(RUNTIME)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev,bench,spark]'
	touch $(STAMP) $(RUNTIME)

# PySpark runs on a JVM: Java 17 from Debian when none is installed (the Spark tests need it).
java:
	@command -v java >/dev/null || { apt-get update && apt-get install -y openjdk-17-jre-headless; }

# The metadata tests start a throwaway PostgreSQL server (tests/pg.py): Debian's when none is installed.
postgresql:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql; }

run: $(RUNTIME)
	$(BIN)/chunkmq serve --host 127.0.0.1 --port 8000 --data-dir ./data

# The console's browser tests drive Debian's Chromium through Playwright (installed from the dev extra).
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium

test: $(STAMP) java postgresql | $(CHROMIUM)
	$(BIN)/ruff check app tests bench
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check app tests bench

bench: $(STAMP)
	$(BIN)/python -m bench

bench-smoke: $(STAMP)
	$(BIN)/python -m bench --smoke

# The console's screenshots in docs/screenshots/ (README, docs/console.md), taken by the browser test.
screenshots: $(STAMP) | $(CHROMIUM)
	CHUNKMQ_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest -q -p no:cacheprovider tests/web/test_browser.py

# Re-fetch the vendored browser assets (committed; neither a build nor a test runs this).
vendor:
	rm -rf /tmp/chunkmq-vendor && mkdir -p /tmp/chunkmq-vendor
	cd /tmp/chunkmq-vendor && npm pack --silent htmx.org@2.0.4 uplot@1.6.32 && \
	  tar xzf htmx.org-2.0.4.tgz && mv package htmx && tar xzf uplot-1.6.32.tgz && mv package uplot
	cp /tmp/chunkmq-vendor/htmx/dist/htmx.min.js /tmp/chunkmq-vendor/htmx/LICENSE static/vendor/htmx/
	cp /tmp/chunkmq-vendor/uplot/dist/uPlot.iife.min.js /tmp/chunkmq-vendor/uplot/dist/uPlot.min.css \
	  /tmp/chunkmq-vendor/uplot/LICENSE static/vendor/uplot/

clean:
	rm -rf $(VENV) data .pytest_cache
