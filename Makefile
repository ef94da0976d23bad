# Two commands do all the set-up on a fresh machine:
#   make run   - create .venv, train the built-in default task, export, serve, answer a request
#   make test  - create .venv, lint (ruff) and run the test suite
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_DIR ?= runs/default
MODEL_BASE ?= models/tfattn
PORT ?= 8501
# Test processes side by side (pytest-xdist); each test file runs whole in one of them, so a
# module's fixtures are built once, and the longest files start first (tests/conftest.py).
TEST_WORKERS ?= 2

.PHONY: run test test-fast lint venv bench clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	# The project itself, editable: tfattn, train, serving and cli import from anywhere
	# (without setuptools' ten-line "Editable installation" banner).
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet --no-deps -e .
	touch $@

venv: $(VENV)/.installed

run: venv
	$(PY) -m serving.tools.demo --port=$(PORT) --preflight
	$(PY) -m train --run_dir=$(RUN_DIR) --export_base_path=$(MODEL_BASE)
	$(PY) -m serving.export.check $(MODEL_BASE)
	$(PY) -m serving.tools.demo --run_dir=$(RUN_DIR) --model_base_path=$(MODEL_BASE) --port=$(PORT)

test: venv lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20 tests

# The whole suite as `make test` runs it, recording each test file's CPU seconds into
# tests/durations.json (the order conftest.py hands files out in), then prints them by product.
.PHONY: test-durations
test-durations: venv lint
	rm -rf .durations
	TFATTN_DURATIONS_OUT=$(CURDIR)/.durations $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile \
	  --no-loadscope-reorder --durations=20 tests
	$(PY) tests/file_durations.py --merge .durations
	$(PY) tests/file_durations.py --by_product

# The unit tests only: no subprocess, training run, XLA compile or polling server, and none that
# took half a CPU second or more in the last `make test-durations` (tests/durations.json).
test-fast: venv
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow" tests

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

bench: venv
	$(PY) benchmarks/train_throughput.py
	$(PY) benchmarks/decode_speed.py
	$(PY) benchmarks/rest_latency.py

clean:
	rm -rf $(VENV) runs models

# The GPU pass (issue 31): one JSON and one markdown report under gpu_pass/, within 8 minutes on
# a GPU once TensorFlow is installed. QUICK=1: the tiniest sizes (checks the pass on a CPU).
gpu-pass: venv
	$(PY) benchmarks/gpu_pass.py --out_dir=gpu_pass $(if $(QUICK),--quick)

# keras-hub's GPT-2 against our language model at equal dimensions (issue 41): installs
# requirements-keras-hub.txt into .venv (it adds packages and changes none of requirements.txt's
# pins), then prints training and generate tokens/s side by side. SIZE=cpu (default) or gpu.
.PHONY: bench-keras-hub
bench-keras-hub: venv
	$(PY) -m pip install --quiet -r requirements-keras-hub.txt
	$(PY) benchmarks/keras_hub_speed.py --size=$(or $(SIZE),cpu)

# CTranslate2 beside our exports (issue 51): installs requirements-ctranslate2.txt into .venv,
# then re-runs the live converter comparison (make_fixture writes the fixture `make test` reads
# without CTranslate2) and the engine benchmark's tests.
.PHONY: check-ctranslate2 bench-engines
check-ctranslate2: venv
	$(PY) -m pip install --quiet -r requirements-ctranslate2.txt
	$(PY) -m pytest -q tests/serving/export/test_ctranslate2_model.py tests/benchmarks/test_engine_speed.py

# Decoding speed with CTranslate2's protocol, every engine on the same weights (docs/speed.md).
bench-engines: venv
	$(PY) -m pip install --quiet -r requirements-ctranslate2.txt
	$(PY) benchmarks/engine_speed.py $(ARGS)

# Issue 50's live comparison with transformers (docs/pretrained.md): a reference venv with torch,
# transformers and sentencepiece (requirements-marian-reference.txt) makes random-weight Marian
# checkpoints, the tiny ones and one of the real base size (6+6, d512, 58,101 pieces), with
# transformers' answers; tfattn imports each and compares (no torch on its side).
REF_VENV ?= .venv-ref
MARIAN_OUT ?= tmp/marian
.PHONY: check-marian
check-marian: venv
	test -x $(REF_VENV)/bin/python || $(PYTHON) -m venv $(REF_VENV)
	$(REF_VENV)/bin/python -m pip install --quiet -r requirements-marian-reference.txt \
	  --extra-index-url https://download.pytorch.org/whl/cpu
	PYTHONPATH=. $(REF_VENV)/bin/python benchmarks/marian_reference.py --out_dir=$(MARIAN_OUT) --base
	$(PY) benchmarks/marian_compare.py --fixtures=$(MARIAN_OUT) --out=$(MARIAN_OUT)/report.json
	REFERENCE_PYTHON=$(REF_VENV)/bin/python $(PY) -m pytest -q \
	  tests/benchmarks/test_engine_speed.py -k marian

# Every engine, transformers included, on check-marian's base-size random-weight Marian
# checkpoint (6+6, d512, 58,101 pieces), each held to the same output length (docs/speed.md).
.PHONY: bench-engines-marian
bench-engines-marian: check-marian
	$(PY) -m pip install --quiet -r requirements-ctranslate2.txt
	$(PY) benchmarks/engine_speed.py --marian_dir=$(MARIAN_OUT)/base --fixed_length \
	  --reference_python=$(REF_VENV)/bin/python $(ARGS)
