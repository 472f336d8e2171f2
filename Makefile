# The README's two commands: `make demo` and `make test`. Both create .venv when it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The tests start about a thousand Python processes. Where PYTHONDONTWRITEBYTECODE is set
# (some images set it), none writes the package's bytecode, and each would compile the
# package's source again (about 0.15 s of CPU a process): the package is compiled once
# first. Only src: a node set a test writes and rewrites is never read from a stale cache.
COMPILE := $(BIN)/python -m compileall -q src

.PHONY: demo test test-fast lint typecheck install clean browser lint-js test-js native

# Installs go through uv: the same versions resolve as with pip (checked: pip freeze alike),
# in about 50 s here where pip takes about 180 s. --compile-bytecode writes the .pyc files
# pip writes; without them, where PYTHONDONTWRITEBYTECODE is set, every process would compile
# numpy, scipy and torch again. pip's own find-links (a local wheel of torch's CPU build, say)
# are passed on. Where uv cannot be had or fails, pip does it all as before.
UV_VERSION := 0.13.8
FIND_LINKS = $(or $(PIP_FIND_LINKS),$(shell $(PY) -m pip config get global.find-links 2>/dev/null))
UV_PIP = $(BIN)/uv pip install --python $(1)/bin/python -q --native-tls --compile-bytecode \
	$(foreach link,$(FIND_LINKS),--find-links $(link))

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q uv==$(UV_VERSION) || echo "uv could not be installed: pip installs"
	# torch pinned beside the package, so its torch requirement is met by the CPU build.
	# LIBERO: its PyPI fork declares numpy < 2, which it does not need (see pyproject.toml).
	if test -x $(BIN)/uv && \
		$(call UV_PIP,$(VENV)) torch==2.13.0 -e '.[dev,libero]' && \
		$(call UV_PIP,$(VENV)) --no-deps rlinf-libero==0.1.3; then :; \
	else \
		echo "pip installs (uv is missing or failed)" && \
		$(BIN)/pip install -q torch==2.13.0 && \
		$(BIN)/pip install -q -e '.[dev,libero]' && \
		$(BIN)/pip install -q --no-deps rlinf-libero==0.1.3; \
	fi
	touch $(STAMP)

# openpi-client (the reference client of the policy-server protocol) needs numpy < 2: it
# lives in its own small environment, where the protocol tests run it against our server.
OPENPI := .venv-openpi
OPENPI_STAMP := $(OPENPI)/.installed
# typing_extensions: openpi-client imports it without declaring it
OPENPI_REQS := "openpi-client==0.1.2" "numpy<2" typing_extensions

$(OPENPI_STAMP): | $(STAMP)
	test -x $(OPENPI)/bin/python || $(PY) -m venv $(OPENPI)
	if test -x $(BIN)/uv && $(call UV_PIP,$(OPENPI)) $(OPENPI_REQS); then :; \
	else $(OPENPI)/bin/pip install -q $(OPENPI_REQS); fi
	touch $(OPENPI_STAMP)

# The dashboard's JavaScript (src/agentcanvas/api/web/js): ESLint and unit tests run by Node
# (node --test tests/js, no package needed). node_modules holds ESLint, from the lockfile.
NODE_STAMP := node_modules/.installed

$(NODE_STAMP): package.json $(wildcard package-lock.json)
	if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; \
	else npm install --no-audit --no-fund; fi
	touch $(NODE_STAMP)

lint-js: $(NODE_STAMP)
	node_modules/.bin/eslint src/agentcanvas/api/web/js tests/js eslint.config.js

test-js:
	node --test tests/js/

install: $(STAMP) $(OPENPI_STAMP) $(NODE_STAMP)

# The firing log's summaries, compiled by mypyc (scripts/build_native.py; about 6 s): the
# module runs its copy only while the copy was built from its current source; a new .venv
# builds it again. Where the build fails (no C compiler) this says why and the Python walk
# runs: the same summaries.
NATIVE_STAMP := build/native/.built

$(NATIVE_STAMP): src/agentcanvas/graph/summarize.py scripts/build_native.py $(STAMP)
	$(BIN)/python scripts/build_native.py && touch $@ || echo "the Python summaries run"

native: $(NATIVE_STAMP)

demo: $(STAMP) $(NATIVE_STAMP)
	$(COMPILE)
	HF_HUB_OFFLINE=1 $(BIN)/agentcanvas demo

# Browser tests drive Debian's chromium through Playwright (its own browser download cannot
# work offline). Installed when missing and we may (root); otherwise those tests skip.
browser:
	@command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
		(apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
		echo "chromium could not be installed: browser tests will be skipped"

# pytest-xdist workers: one per core, at most 4 (each test starts its own servers, so more
# workers than cores only queue). tests/conftest.py hands each worker whole modules (their
# fixtures made once), and the Ray tests (tests/cluster) as one unit. TEST_WORKERS=0: one process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; echo $$n)
XDIST := -n $(TEST_WORKERS)

test: $(STAMP) $(NATIVE_STAMP) $(OPENPI_STAMP) browser test-js
	$(COMPILE)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST)

# The inner loop: everything not marked slow (no backends, browsers or clusters).
test-fast: $(STAMP) $(NATIVE_STAMP)
	$(COMPILE)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) -m "not slow"

lint: $(STAMP) lint-js
	$(BIN)/ruff format --check src tests bench scripts
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

clean:
	rm -rf $(VENV) $(OPENPI) outputs node_modules build src/agentcanvas/graph/_summarize_compiled*.so
