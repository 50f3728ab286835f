# Two commands for a new user:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
POETC  := $(VENV)/bin/poetc

.PHONY: setup demo lint test bench clean device-demo schemas bench-reproducibility

setup: $(VENV)/.installed

# torch is pinned to the CPU build first: an unpinned torch pulls several GB of CUDA wheels.
# constraints.txt pins every dependency to the versions CI tested (see its header).
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt torch==2.13.0
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,ray]'
	touch $@

demo: setup
	$(POETC) compile models/kws_dscnn.onnx --device m4 --ram 256k -o schedules/kws_dscnn_m4.poet
	$(POETC) inspect schedules/kws_dscnn_m4.poet --no-listing
	$(POETC) verify models/kws_dscnn.onnx --schedule schedules/kws_dscnn_m4.poet

# One training step on an emulated Cortex-M4 (qemu-system-arm -M mps2-an386), checked
# against PyTorch: first a schedule that both pages and recomputes (160 KiB, deadline
# 1.5x the compute-only time: the m4's SD card only pays once the deadline rules out
# recomputing everything), then the shipped 256 KiB schedule of `make demo` (last line).
DEVICE_PAGING := schedules/kws_dscnn_m4_160k_1.5x.poet

schedules/kws_dscnn_m4.poet: | setup
	$(POETC) compile models/kws_dscnn.onnx --device m4 --ram 256k -o $@

$(DEVICE_PAGING): | setup
	$(POETC) compile models/kws_dscnn.onnx --device m4 --ram 160k --deadline 1.5x --time-limit 30 -o $@

device-demo: setup schedules/kws_dscnn_m4.poet $(DEVICE_PAGING)
	$(PY) -m poet_compiler.codegen.emit_c.demo models/kws_dscnn.onnx $(DEVICE_PAGING) --require-paging-and-remat
	$(PY) -m poet_compiler.codegen.emit_c.demo models/kws_dscnn.onnx schedules/kws_dscnn_m4.poet

# Lint and types (run by CI before the tests): configured in pyproject.toml.
lint: setup
	$(VENV)/bin/ruff check poet_compiler/
	$(VENV)/bin/mypy poet_compiler/

test: setup
	$(PY) -m pytest -n 2 -q

# The JSON Schemas of the sidecar report and sweep rows (docs/schemas/), exported from
# poet_compiler/schemas.py; tests/comparison/test_schemas.py fails when they are stale.
schemas: setup
	$(PY) -m poet_compiler.schemas

# Same input, same bytes: four cells compiled 3 times idle, 2 under load, once on one core
# (bench/reproducibility.py; about an hour on 2 cores). QUICK=1: the README demo only.
bench-reproducibility: setup
	PYTHONPATH=. $(PY) bench/reproducibility.py $(if $(QUICK),--quick) -o bench/results/reproducibility$(if $(QUICK),_quick)

clean:
	rm -rf $(VENV)
