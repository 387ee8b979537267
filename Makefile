# Two commands for a fresh machine: `make run` serves the bundled model, `make test` runs
# every check. Both create .venv when it is missing. llama-cpp-python compiles llama.cpp
# from source the first time (~10 min on 2 cores); pip's wheel cache makes later installs fast.
# On a machine with the CUDA toolkit and an NVIDIA GPU it is built with CUDA instead, into a
# cache of its own (tools/install_llama_cpp.sh; INFERTUI_CUDA=0 or 1 decides for you).
# The Hyperswarm bridge's npm packages install into the user cache (Node.js >= 18 needed).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TYPED  := build/typed/infertui

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml core/transport/p2p/bridge/package-lock.json tools/install_llama_cpp.sh \
		setup.py $(wildcard core/engine/llama/*.c core/engine/llama/*.h)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	sh tools/install_llama_cpp.sh $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m infertui.core.transport.p2p.runtime
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/infertui host

test: $(STAMP) lint
	$(BIN)/python -m pytest -n auto --dist worksteal

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/layering.py
	mkdir -p $(TYPED)
	ln -sfn ../../../core $(TYPED)/core
	ln -sfn ../../../tui $(TYPED)/tui
	ln -sfn ../../../app $(TYPED)/app
	ln -sfn ../../../infertui_pkg/__init__.py $(TYPED)/__init__.py
	$(BIN)/mypy -p infertui

bench: $(STAMP)
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_http.py
	$(BIN)/python bench/bench_p2p.py
	$(BIN)/python bench/bench_tui.py
	$(BIN)/python bench/bench_batching.py

clean:
	rm -rf $(VENV) build/typed .pytest_cache .mypy_cache .ruff_cache
