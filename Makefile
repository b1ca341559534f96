# `make demo` and `make test` each create .venv and install vprom into it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_OUT ?= build/demo

.PHONY: demo test install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/vprom build --synthetic --out $(DEMO_OUT)

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf build .pytest_cache
