"""gpt2_large: a >= 1,500-node op-level model traced without weights.

``gpt2_large`` is built on the meta device, so tracing it costs no weights; anything
that would run it refuses with one line. ``gpt2_large_mini`` has the same graph with
real weights, and a schedule verifies on it bitwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import models
from poet_compiler.errors import FrontendError
from poet_compiler.frontends import trace_zoo

POETC = Path(sys.executable).with_name("poetc")


@pytest.fixture(scope="module")
def large():
    return trace_zoo("gpt2_large")


def test_gpt2_large_has_at_least_1500_op_nodes_and_no_weights(large) -> None:
    g = large.graph
    assert g.n >= 1500 and g.n == 1567
    assert (g.count("forward"), g.count("loss"), g.count("backward")) == (618, 3, 946)
    params = list(large.module.parameters())
    assert all(p.is_meta for p in params)                      # no storage was allocated
    # GPT-2 large with a tied LM head: 774,030,080 at 1,024 positions, 1280 x 512 fewer at 512.
    assert sum(p.numel() for p in params) == 774_030_080 - 1280 * (1024 - 512)
    # The byte counts are the real model's: the largest tensors are the float32 token
    # embedding's size (its gradient), 50257 x 1280 x 4 B.
    assert max(n.output_bytes for n in g.nodes) == 50257 * 1280 * 4


def test_running_it_is_refused_in_one_line(large) -> None:
    from poet_compiler.schedule.program import Program
    from poet_compiler.torch_exec.executor import ScheduledStep

    with pytest.raises(FrontendError, match="meta device.*use gpt2_large_mini") as err:
        ScheduledStep(large, Program(large.graph.n, ()))
    assert "\n" not in str(err.value)


def test_export_is_refused_in_one_line(tmp_path) -> None:
    proc = subprocess.run([str(POETC), "export", "gpt2_large", "-o", str(tmp_path / "g.onnx")],
                          capture_output=True, text=True, timeout=300)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    assert "meta device" in err and "gpt2_large_mini" in err
    assert not (tmp_path / "g.onnx").exists()


@pytest.mark.slow
def test_mini_has_the_same_graph_and_verifies(large, tmp_path) -> None:
    """Same nodes, ops, kinds and edges; a schedule on the mini config is bitwise autograd's,
    and the same command on gpt2_large is refused with one line, exit 2."""
    mini = trace_zoo("gpt2_large_mini").graph
    big = large.graph
    assert mini.n == big.n
    assert [(n.name, n.kind, n.op, n.op_class, n.inputs) for n in mini.nodes] == \
           [(n.name, n.kind, n.op, n.op_class, n.inputs) for n in big.nodes]
    assert not hasattr(models.get("gpt2_large_mini").build(), "poet_weights_from")
    sched = tmp_path / "mini.poet"
    run = subprocess.run([str(POETC), "compile", "gpt2_large_mini", "--device", "a72", "--ram", "60%",
                          "--strategy", "chen_greedy", "-o", str(sched), "--quiet"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    ver = subprocess.run([str(POETC), "verify", "gpt2_large_mini", "--schedule", str(sched), "--json"],
                         capture_output=True, text=True, timeout=900)
    assert ver.returncode == 0, ver.stdout + ver.stderr
    figs = json.loads(ver.stdout)
    assert figs["ok"] and figs["grads_bitwise"] and figs["max_abs_grad_diff"] == 0.0
    assert figs["n_nodes"] == big.n
    # The same program on gpt2_large (a planning file: no sizes to disagree with): refused
    # by the meta-device check, one line, exit 2.
    from poet_compiler.codegen.bytecode import decode, encode
    from poet_compiler.schedule.program import Instruction, Program

    program = decode(sched.read_bytes()).program
    plan = tmp_path / "large.poet"
    plan.write_bytes(encode(Program(big.n, tuple(Instruction(i.op, i.node) for i in program))))
    refused = subprocess.run([str(POETC), "verify", "gpt2_large", "--schedule", str(plan)],
                             capture_output=True, text=True, timeout=900)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    err = refused.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "meta device" in err and "gpt2_large_mini" in err
