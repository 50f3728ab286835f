"""A QDQ model from onnxruntime's quantize_static: imported with its integers, and the int8
forward against onnxruntime's int8 inference (docs/int8.md, "Agreement with onnxruntime")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from poet_compiler.codegen.emit_c import dataset
from poet_compiler.frontends.onnx.export import export_bytes
from poet_compiler.quant import onnx_import, qdq_check

pytest.importorskip("onnxruntime")


def test_qdq_forward_agrees_with_onnxruntime(tmp_path):
    import models

    split = dataset.digits()
    torch.manual_seed(0)
    module = models.get("digits_cnn").build()
    opt = torch.optim.SGD(module.parameters(), lr=0.02, momentum=0.9)
    x, y = torch.from_numpy(split.x_train), torch.from_numpy(split.y_train)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny batches: a second thread only waits (3 s against 110 s beside other jobs)
    try:
        for b in range(200):  # logits of a partly trained model, not of an initial one near zero
            i = b % (len(x) // 16)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(module(x[i * 16:(i + 1) * 16]), y[i * 16:(i + 1) * 16]).backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    (tmp_path / "f.onnx").write_bytes(export_bytes(module, (x[:16],)))
    qdq_check.quantize_qdq(tmp_path / "f.onnx", tmp_path / "q.onnx", split.x_train[:256], 16)
    graph = onnx_import.read(tmp_path / "q.onnx")
    assert len(graph.fixed.weights) == 4 and len(graph.fixed.biases) == 4
    assert all(len(np.unique(s)) > 1 for _, s in graph.fixed.weights.values())  # per channel
    agreement = qdq_check.compare(tmp_path / "q.onnx", split.x_test)
    assert agreement.outputs == 3520
    assert agreement.share_equal >= 0.95
    assert agreement.max_steps <= 1
