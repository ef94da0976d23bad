# Two commands do all the set-up on a fresh machine:
#   make run   - create .venv, train the built-in default task, export, serve, answer a request
#   make test  - create .venv and run the test suite
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_DIR ?= runs/default
MODEL_BASE ?= models/tfattn
PORT ?= 8501

.PHONY: run test venv bench clean

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

venv: $(VENV)/.installed

run: venv
	$(PY) -m train --run_dir=$(RUN_DIR) --export_base_path=$(MODEL_BASE)
	$(PY) -m serving.check $(MODEL_BASE) > $(RUN_DIR)/serving_check.txt && tail -n 1 $(RUN_DIR)/serving_check.txt
	$(PY) -m serving.demo --run_dir=$(RUN_DIR) --model_base_path=$(MODEL_BASE) --port=$(PORT)

test: venv
	$(PY) -m pytest -q tests

bench: venv
	$(PY) benchmarks/train_throughput.py
	$(PY) benchmarks/decode_speed.py
	$(PY) benchmarks/rest_latency.py

clean:
	rm -rf $(VENV) runs models
