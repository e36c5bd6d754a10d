# `make run` and `make test` do all of the set-up themselves on a fresh Debian machine with Python 3.11.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUNTIME := $(VENV)/.runtime

.PHONY: run test lint bench bench-smoke clean java

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

run: $(RUNTIME)
	$(BIN)/chunkmq serve --host 127.0.0.1 --port 8000 --data-dir ./data

test: $(STAMP) java
	$(BIN)/ruff check app tests bench
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check app tests bench

bench: $(STAMP)
	$(BIN)/python -m bench

bench-smoke: $(STAMP)
	$(BIN)/python -m bench --smoke

clean:
	rm -rf $(VENV) data .pytest_cache
