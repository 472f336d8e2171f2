# The README's two commands: `make demo` and `make test`. Both create .venv when it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch first, pinned, so the package's own torch requirement is already met (CPU build).
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/agentcanvas demo

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/mypy

clean:
	rm -rf $(VENV) outputs
