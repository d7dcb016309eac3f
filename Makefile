# greenhttp developer commands. Every target sets up what it needs on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: build compiler test test-libuv test-pure demo lint bench soak fuzz docs clean system-deps

# The install compiles the modules of setup.py's COMPILED list with mypyc (in
# place, beside their sources), so an edit to one of them reinstalls: `make build`.
# tests/compiled.py refuses a compiled module older than its source.
COMPILED_SRC := $(addprefix lib/,$(shell grep -o '"greenhttp/[^"]*\.py"' setup.py | tr -d '"'))

$(STAMP): pyproject.toml setup.py $(COMPILED_SRC)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(MAKE) --no-print-directory compiler
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,lint]'
	touch $(STAMP)

build: $(STAMP)

# A C compiler and the Python headers, for the compiled modules. Without them the
# install is pure Python (setup.py says so), which works the same, only slower.
compiler:
	@{ command -v cc >/dev/null 2>&1 && $(PY) -c "import os, sys, sysconfig; \
	  sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc python3-dev) >/dev/null; \
	  else echo "no C compiler or Python headers: greenhttp installs as pure Python"; fi; }

# nginx is the real third-party peer of the interop tests and the benchmark;
# Node's `ws` server is another (tests/interop/test_ws_node.py).
system-deps:
	@command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx) >/dev/null; \
	  else echo "nginx is missing: install it (apt-get install nginx)"; exit 1; fi; }
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm) >/dev/null; \
	  else echo "node and npm are missing: install them (apt-get install nodejs npm)"; exit 1; fi; }

test: $(STAMP) system-deps
	$(PY) -m pytest -q

# The same suite on gevent's libuv loop (its default on Windows); CI runs both.
# GEVENT_DEBUG=debug makes gevent warn of a watcher dropped without close() (on
# libuv its memory is freed while libuv still links it: a crash, later, elsewhere),
# and the suite turns that warning into the failure of the test that dropped it.
test-libuv: $(STAMP) system-deps
	GEVENT_LOOP=libuv GEVENT_DEBUG=debug $(PY) -m pytest -q

# The same suite on the pure-Python sources of the compiled modules (tests/compiled.py):
# what a machine without a C compiler installs. CI runs it too.
test-pure: $(STAMP) system-deps
	GREENHTTP_PURE_PYTHON=1 $(PY) -m pytest -q

demo: $(STAMP)
	$(PY) examples/demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check lib tests examples benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: $(STAMP) system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist lib/*.egg-info .pytest_cache .mypy_cache .ruff_cache
	find lib -name '*.so' -delete
# The documentation site (docs/, Sphinx + MyST + furo). Warnings are errors,
# and every code sample on the pages is then run against a loopback server.
# The site is written to docs/_build/html (git-ignored). A clean build each
# time: Sphinx re-reads only changed pages, so an incremental build would
# not repeat the warnings of unchanged ones.
DOCS_OUT   := docs/_build/html
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	rm -rf $(DOCS_OUT) docs/_build/doctrees
	$(PY) -m sphinx -b html -W --keep-going -q -d docs/_build/doctrees docs $(DOCS_OUT)
	$(PY) docs/check_samples.py
	@echo "docs: $(DOCS_OUT)/index.html"
# --- reliability: the soak and the fuzzers (neither runs in `make test` or CI) ---------
# `soak` is already in .PHONY; add `fuzz` there.
# make soak                                  ten minutes of load with injected faults (benchmarks/soak.py)
# make soak SOAK_ARGS="--duration 20"        a short run, to check the script itself
# make fuzz                                  every atheris target, FUZZ_RUNS inputs each
# make fuzz FUZZ_RUNS=1000000 FUZZ_ARGS="-max_total_time=600"
SOAK_ARGS ?=
FUZZ_RUNS ?= 200000
FUZZ_ARGS ?=

soak: $(STAMP)
	$(PY) benchmarks/soak.py $(SOAK_ARGS)

fuzz: $(STAMP)
	$(PY) -m pip install -q atheris
	@for target in tests/fuzz/fuzz_*.py; do \
	  case $$target in */fuzz_targets.py) continue;; esac; \
	  echo "== $$target"; \
	  $(PY) $$target -atheris_runs=$(FUZZ_RUNS) $(FUZZ_ARGS) || exit 1; \
	done
