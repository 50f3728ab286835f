# Two commands for a new user:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
POETC  := $(VENV)/bin/poetc

.PHONY: setup demo lint test test-latest bench clean device-demo device-train device-finetune measure-reserve schemas \
	$(BENCH_TARGETS) bench-same-bytes-stress

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
# against PyTorch: first a schedule that both pages and recomputes (211 KiB for the whole
# firmware, which leaves the arena about 160 KiB beside the parameters, gradients, batch,
# outputs and runtime reserve; deadline 2x the compute-only time: the m4's SD card only pays
# once the deadline rules out recomputing everything, and at 1.5x no schedule is found within
# 30 s since the kernels got ~5x faster and the SD card did not), then the shipped 256 KiB
# schedule of `make demo` (last line). Each fails unless the firmware's RAM (.data + .bss +
# stack, from the ELF) fits the nRF52840's 262,144 B.
DEVICE_PAGING := schedules/kws_dscnn_m4_211k_2x.poet

schedules/kws_dscnn_m4.poet: profiles/m4.json | setup
	$(POETC) compile models/kws_dscnn.onnx --device m4 --ram 256k -o $@

$(DEVICE_PAGING): profiles/m4.json | setup
	$(POETC) compile models/kws_dscnn.onnx --device m4 --ram 211k --deadline 2x --time-limit 30 -o $@

device-demo: setup schedules/kws_dscnn_m4.poet $(DEVICE_PAGING)
	$(PY) -m poet_compiler.codegen.emit_c.demo models/kws_dscnn.onnx $(DEVICE_PAGING) --require-paging-and-remat
	$(PY) -m poet_compiler.codegen.emit_c.demo models/kws_dscnn.onnx schedules/kws_dscnn_m4.poet

# The m4 profile's runtime reserve (stack, runtime state, per-node tables), measured on the
# firmware `poetc emit-c` writes, under QEMU: re-run after changing the kernels, the runtime
# or the drivers (poet_compiler/codegen/emit_c/reserve.py).
measure-reserve: setup
	$(PY) -m poet_compiler.codegen.emit_c.reserve --write

# Training on the emulated Cortex-M4: digits_cnn (models/digits.py) trained from scratch on
# scikit-learn's 8x8 digits (80/20 split, seed 0), 5 epochs, by the firmware of
# `poetc emit-c --train-loop`. The schedule carries the SGD update (momentum 0.9) of every
# parameter and recomputes: 128 KiB for everything (parameters, momentum, batch and
# activations), deadline 1.04x the compute-only step. It no longer pages: with the kernels'
# own figures (profiles/m4.json) an SD transfer costs more time and energy than any
# recompute at every budget digits_cnn fits (BENCHMARKS.md "Device training"); paging is
# `make device-demo`'s. Losses are checked against the same loop in PyTorch
# (torch.optim.SGD), held-out accuracy is computed on the device.
DEVICE_TRAIN := schedules/digits_cnn_m4_sgd_128k_1.04x.poet

$(DEVICE_TRAIN): profiles/m4.json | setup
	$(POETC) compile digits_cnn --device m4 --ram 128k --deadline 1.04x --optimizer sgd:lr=0.02,momentum=0.9 \
	  --time-limit 30 -o $@

device-train: setup $(DEVICE_TRAIN)
	$(PY) -m poet_compiler.codegen.emit_c.train_demo digits_cnn $(DEVICE_TRAIN) --epochs 5 --log-every 10 \
	  --require-remat

# Fine-tuning on the emulated Cortex-M4: digits_cnn pretrained on the host on digits 0-4
# (10 epochs), then fine-tuned on the device on digits 5-9 with its convolution weights
# frozen (--train 'classifier.*,*.bias', SGD momentum 0.5 in the schedule), at a budget
# where the schedule recomputes (deadline 1.05x: 1.03x has no schedule at 121 KiB since the
# kernels got faster; no paging, as for device-train); accuracy before -> after, frozen
# parameters checked bit-identical.
DEVICE_FINETUNE := schedules/digits_cnn_m4_finetune_121k_1.05x.poet

$(DEVICE_FINETUNE): profiles/m4.json | setup
	$(POETC) compile digits_cnn --device m4 --ram 121k --deadline 1.05x --optimizer sgd:lr=0.1,momentum=0.5 \
	  --train 'classifier.*,*.bias' --time-limit 30 -o $@

device-finetune: setup $(DEVICE_FINETUNE)
	$(PY) -m poet_compiler.codegen.emit_c.train_demo digits_cnn $(DEVICE_FINETUNE) --classes 5-9 \
	  --pretrain-classes 0-4 --epochs 4 --log-every 11 --min-accuracy 0 --require-remat

# Lint and types (run by CI before the tests): configured in pyproject.toml.
lint: setup
	$(VENV)/bin/ruff check poet_compiler/
	$(VENV)/bin/mypy poet_compiler/

test: setup
	$(PY) -m pytest -n 2 --dist worksteal -q

# The newest releases pyproject.toml allows, as `pip install .` gives a user (no
# constraints.txt; torch pinned to the CPU build first, as in setup, which the range
# keeps: --upgrade would take a CUDA build), in a fresh venv of its own: the smoke subset (pytest -m smoke: the README demo with every solver, POET's linear
# example, verify, emit-c on the host, the usage errors, a faulty solver child). CI runs
# it after `make test`; it prints the versions it tested.
LATEST := .venv-latest
test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --upgrade pip
	$(LATEST)/bin/python -m pip install --quiet torch==2.13.0
	$(LATEST)/bin/python -m pip install --quiet '.[dev]'
	$(LATEST)/bin/poetc --version
	$(LATEST)/bin/python -m pytest -n 2 -q -m smoke

# The JSON Schemas of the sidecar report and sweep rows (docs/schemas/), exported from
# poet_compiler/schemas.py; tests/comparison/test_schemas.py fails when they are stale.
schemas: setup
	$(PY) -m poet_compiler.schemas

# Benchmarks: one target per table of BENCHMARKS.md, each writing one file of
# $(BENCH_RESULTS). QUICK=1 runs the table's smallest cell instead (tests/test_benchmarks.py
# runs every target named in BENCHMARKS.md that way, into a temporary BENCH_RESULTS).
# Timings are the machine's: see BENCHMARKS.md for the machine and its load.
BENCH_RESULTS ?= bench/results
QUICK ?=
QUICK_FLAG := $(if $(QUICK),--quick)
BENCH := PYTHONPATH=. $(PY)
comma := ,
empty :=
space := $(empty) $(empty)
GRID_CELLS := kws_m4_256k $(foreach m,resnet18_cifar vgg16_cifar,$(foreach d,m4 a72,$(foreach r,30 50 70,$(foreach t,1.0 1.5 2.0,op_$(m)_$(d)_$(r)_$(t)))))
SCALE_CELLS := mobilenetv2_a72_50 mobilenetv2_a72_70 gpt2_a72_50 gpt2_a72_70 bert_base_a72_50 bert_base_a72_70 gpt2_large_a72_50
DAG_CELLS := dag100_90_300 dag100_80_300 dag250_90 dag250_80 dag500_90 dag500_80_300 dag1000_90 dag1000_80
# Short --time-limit on the cells that once ran past it, idle and beside two busy loops.
LIMIT_CELLS := dag250_80@10 dag1000_80@10 op_vgg16_cifar_a72_30_2.0@10 op_resnet18_cifar_m4_50_1.5@8 \
	mobilenetv2_a72_50@10 bert_base_a72_70@20 gpt2_large_a72_50_20
cells = $(subst $(space),$(comma),$(strip $(1)))
BENCH_TARGETS := bench-optimizer bench-scale bench-dags bench-peers-poet bench-peers-moccasin bench-exactness bench-baselines \
	bench-bytecode bench-runtime-size bench-device bench-device-int8 bench-device-training bench-torch bench-sweep-cache \
	bench-reproducibility bench-time-limits bench-time-limit-rule

bench: $(BENCH_TARGETS)

bench-optimizer: setup
	rm -f $(BENCH_RESULTS)/optimizer_grid.jsonl
	$(BENCH) bench/time_limit_bench.py --defaults --cells $(call cells,$(if $(QUICK),op_vgg16_cifar_m4_70_1.5,$(GRID_CELLS))) -o $(BENCH_RESULTS)/optimizer_grid.jsonl

bench-scale: setup
	rm -f $(BENCH_RESULTS)/scale.jsonl
	$(BENCH) bench/time_limit_bench.py --cells $(call cells,$(if $(QUICK),gpt2_a72_50,$(SCALE_CELLS))) -o $(BENCH_RESULTS)/scale.jsonl

# The peers run from their own checkouts and Pythons (bench/peers_*.py say how they were
# set up): POET=<checkout of POET's repository> POET_PYTHON=<a Python with PuLP>;
# without POET only poetc's side runs, on the graph the tree holds.
POET ?=
POET_PYTHON ?= python3
MOCCASIN ?=
MOCCASIN_PYTHON ?= python3

bench-dags: setup
	rm -f $(BENCH_RESULTS)/dags.jsonl
	$(BENCH) bench/time_limit_bench.py --cells $(call cells,$(if $(QUICK),dag100_90@10,$(DAG_CELLS))) -o $(BENCH_RESULTS)/dags.jsonl

bench-time-limits: setup
	rm -f $(BENCH_RESULTS)/time_limits.jsonl
	for busy in 0 $(if $(QUICK),,2); do $(BENCH) bench/time_limit_bench.py --busy $$busy \
	  --cells $(call cells,$(if $(QUICK),dag250_80@10,$(LIMIT_CELLS))) -o $(BENCH_RESULTS)/time_limits.jsonl || exit 1; done

# An explicit --time-limit sets the effort (0.3 units per second): the README demo, ResNet-18-CIFAR
# m4 50 % 1.5x and Moccasin's DAG 100 at 0.8 and DAG 250 at 0.9 at 10-300 s, idle and beside two
# busy loops (needs MOCCASIN and MOCCASIN_PYTHON, as bench-peers-moccasin).
# QUICK (the suite's smoke run of this target): one cell at one limit.
LIMIT_RULE_CELLS := kws_m4_256k$(if $(QUICK),,$(comma)resnet18_m4_50$(if $(MOCCASIN),$(comma)mdag100_80$(comma)mdag250_90))
bench-time-limit-rule: setup
	rm -f $(BENCH_RESULTS)/time_limit_rule.jsonl
	for busy in 0 2; do $(BENCH) bench/time_limit_bench.py --busy $$busy --cells $(LIMIT_RULE_CELLS) \
	  --limits $(if $(QUICK),10,10$(comma)30$(comma)60$(comma)120$(comma)300) \
	  $(if $(MOCCASIN),--moccasin $(MOCCASIN) --moccasin-python $(MOCCASIN_PYTHON)) \
	  -o $(BENCH_RESULTS)/time_limit_rule.jsonl || exit 1; done
	$(BENCH) bench/time_limit_bench.py --table $(BENCH_RESULTS)/time_limit_rule.jsonl

bench-peers-poet: setup
	$(BENCH) bench/peers_poet.py $(QUICK_FLAG) $(if $(POET),--poet $(POET) --poet-python $(POET_PYTHON)) \
		-o $(BENCH_RESULTS)/peers_poet.md

bench-peers-moccasin: setup
	@test -n "$(MOCCASIN)" || { echo "bench-peers-moccasin: give MOCCASIN=<checkout of Moccasin's repository> and MOCCASIN_PYTHON=<a Python with networkx and ortools 9.6>" >&2; exit 2; }
	$(BENCH) bench/peers_moccasin.py $(QUICK_FLAG) --moccasin $(MOCCASIN) --moccasin-python $(MOCCASIN_PYTHON) \
		-o $(BENCH_RESULTS)/peers_moccasin.md

bench-exactness: setup
	$(BENCH) bench/oracle_gap.py $(if $(QUICK),--seeds 1) -o $(BENCH_RESULTS)/oracle_gap.md

bench-baselines: setup
	$(BENCH) bench/baselines_bench.py $(QUICK_FLAG) -o $(BENCH_RESULTS)/baselines.md

bench-bytecode: setup
	$(BENCH) bench/bytecode_bench.py $(QUICK_FLAG) --models mlp,cifar_cnn_tiny,kws_dscnn,bert_tiny,gpt2_tiny,resnet18_cifar,vgg16_cifar \
		--time-limit 10 -o $(BENCH_RESULTS)/bytecode.md

bench-runtime-size:
	tmp=$$(mktemp -d) && $(MAKE) --no-print-directory -C runtime/c BUILD=$$tmp size > $$tmp/size.txt; rc=$$?; \
		sed "s|$$tmp/||g" $$tmp/size.txt > $(BENCH_RESULTS)/runtime_size.txt; rm -rf $$tmp; exit $$rc
	cat $(BENCH_RESULTS)/runtime_size.txt

bench-device: setup
	$(BENCH) bench/device_icount.py $(QUICK_FLAG) -o $(BENCH_RESULTS)/device_icount.md

bench-device-int8: setup
	$(BENCH) bench/device_icount_int8.py -o $(BENCH_RESULTS)/device_icount_int8.md

bench-device-training: setup
	$(BENCH) bench/device_training.py $(QUICK_FLAG) -o $(BENCH_RESULTS)/device_training.md

# Compiles with Inductor (C++): about an hour on 2 cores. QUICK=1: the U-Net at 50 %, aot_eager.
bench-torch: setup
	$(BENCH) bench/torch_bench.py $(QUICK_FLAG) -o $(BENCH_RESULTS)/torch.md
	$(BENCH) bench/checkpoint_cost.py $(QUICK_FLAG) -o $(BENCH_RESULTS)/checkpoint_cost.md
	$(BENCH) bench/op_timing.py $(QUICK_FLAG) -o $(BENCH_RESULTS)/op_timing.md

bench-sweep-cache: setup
	$(BENCH) bench/sweep_cache_bench.py $(QUICK_FLAG) -o $(BENCH_RESULTS)/sweep_cache.md

# Same input, same bytes: four cells compiled 3 times idle, 2 under load, once on one core
# (bench/reproducibility.py; about an hour on 2 cores). QUICK=1: the README demo only.
bench-reproducibility: setup
	PYTHONPATH=. $(PY) bench/reproducibility.py $(if $(QUICK),--quick) -o $(BENCH_RESULTS)/reproducibility

# Same bytes under load, run after run (bench/same_bytes_stress.py): the 48 random problems,
# the README demo and ResNet-18-CIFAR m4 50 % 1.5x, RUNS runs each (default 100: a defect
# showing in 1 run in 36 shows with 94 %) at --threads 1 and the default, two at a time
# beside two busy loops; REV=<revision> measures that revision. Hours on 2 cores, so not
# part of `make bench`. QUICK=1 (the test suite's smoke run): 2 runs of random problems 36 and 37
# (DMA, a deadline, gap 1 %), no busy loops beside the other tests.
STRESS_QUICK := --cells random --problems 36$(comma)37 --runs 2 --threads-list default --busy 0
bench-same-bytes-stress: setup
	$(BENCH) bench/same_bytes_stress.py --rev $(or $(REV),.) $(if $(QUICK),$(STRESS_QUICK),--runs $(or $(RUNS),100)) \
		-o $(BENCH_RESULTS)/same_bytes_stress

clean:
	rm -rf $(VENV)
