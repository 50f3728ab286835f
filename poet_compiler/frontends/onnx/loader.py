"""Reading and checking an ONNX file: every way a file can be wrong becomes one
FrontendError line that names the file."""

from __future__ import annotations

from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from poet_compiler.errors import FrontendError

from .context import CONVERTERS


def read_model(path: str | Path) -> onnx.ModelProto:
    """Parse and check ``path``; FrontendError if it is missing, not ONNX or invalid."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise FrontendError(f"{p}: no such file") from None
    except OSError as exc:
        raise FrontendError(f"{p}: cannot read ({exc.strerror or exc})") from None
    return parse_model(data, str(p))


def parse_model(data: bytes, where: str) -> onnx.ModelProto:
    if not data:
        raise FrontendError(f"{where}: empty file, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        raise FrontendError(
            f"{where}: not an ONNX model (protobuf parse failed; truncated or another format)"
        ) from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise FrontendError(f"{where}: not an ONNX model (no IR version or no graph)")
    check_model(model, where)
    return model


def check_model(model: onnx.ModelProto, where: str) -> None:
    """onnx.checker with strict shape inference (catches truncated and edited graphs)."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise FrontendError(f"{where}: fails the ONNX checker: {_first_line(str(exc))}") from None


def default_opset(model: onnx.ModelProto, where: str) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    raise FrontendError(f"{where}: the model imports no default-domain (ai.onnx) opset")


def check_supported(model: onnx.ModelProto, opset: int, where: str) -> None:
    """Refuse the model before converting anything if any node's op has no converter."""
    bad: list[onnx.NodeProto] = [
        n for n in model.graph.node if n.domain not in ("", "ai.onnx") or n.op_type not in CONVERTERS
    ]
    if not bad:
        return
    first = bad[0]
    op = first.op_type if first.domain in ("", "ai.onnx") else f"{first.domain}::{first.op_type}"
    others = sorted({n.op_type for n in bad[1:]} - {first.op_type})
    more = f"; also unsupported: {', '.join(others)}" if others else ""
    node_name = first.name or (first.output[0] if first.output else "?")
    raise FrontendError(f"{where}: unsupported ONNX op '{op}' (node '{node_name}', opset {opset}){more}")


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    msg = lines[0] if lines else "invalid model"
    return msg[:300]
