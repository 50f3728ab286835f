# Two commands for a new user:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
POETC  := $(VENV)/bin/poetc

.PHONY: setup demo test bench clean

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

test: setup
	$(PY) -m pytest -n 2 -q

clean:
	rm -rf $(VENV)
