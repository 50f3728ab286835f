"""The int8 forward against onnxruntime's int8 inference of the same QDQ model (docs/int8.md,
"Agreement with onnxruntime"): the share of logits codes equal and the largest difference
in quantization steps. onnxruntime is a dev dependency; this module imports it lazily."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from poet_compiler.quant import calibrate, onnx_import, step


@dataclass
class Agreement:
    outputs: int
    equal: int
    max_steps: int

    @property
    def share_equal(self) -> float:
        return self.equal / self.outputs


def quantize_qdq(float_onnx: Path, out: Path, calibration: np.ndarray, batch: int) -> None:
    """onnxruntime.quantization.quantize_static: QDQ, int8 activations and per-channel weights,
    calibrated on ``calibration`` in batches of the model's fixed ``batch``."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{"input": calibration[i:i + batch].astype(np.float32)}
                                 for i in range(0, len(calibration) - batch + 1, batch)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    quantize_static(str(float_onnx), str(out), _Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)


def compare(qdq_onnx: Path, x: np.ndarray) -> Agreement:
    """Run both on the float batch ``x``: onnxruntime's float output is requantized to the
    logits' QParams (it dequantizes the int8 codes it computed, so this recovers them)."""
    import onnxruntime as ort

    graph = onnx_import.read(qdq_onnx)
    model = calibrate.quantize(graph, x, np.zeros(len(x), np.int64))
    ours = step.logits(model, model.qparams[model.input].quantize(x)).astype(np.int64)
    sess = ort.InferenceSession(str(qdq_onnx), providers=["CPUExecutionProvider"])
    batch = graph_batch = int(sess.get_inputs()[0].shape[0])
    n = len(x) // graph_batch * batch
    ours = ours[:n]
    theirs_float = np.concatenate([sess.run(None, {sess.get_inputs()[0].name: x[i:i + batch].astype(np.float32)})[0]
                                   for i in range(0, n, batch)])
    theirs = model.qparams[model.output].quantize(theirs_float).astype(np.int64)
    diff = np.abs(ours - theirs)
    return Agreement(int(diff.size), int(np.count_nonzero(diff == 0)), int(diff.max()))
