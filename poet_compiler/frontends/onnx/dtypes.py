"""ONNX element types <-> torch dtypes, and array/tensor conversion of constants."""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from poet_compiler.errors import FrontendError

_TP = onnx.TensorProto
ONNX_TO_TORCH: dict[int, torch.dtype] = {
    _TP.FLOAT: torch.float32,
    _TP.DOUBLE: torch.float64,
    _TP.FLOAT16: torch.float16,
    _TP.BFLOAT16: torch.bfloat16,
    _TP.INT8: torch.int8,
    _TP.UINT8: torch.uint8,
    _TP.INT16: torch.int16,
    _TP.INT32: torch.int32,
    _TP.INT64: torch.int64,
    _TP.BOOL: torch.bool,
}
FLOAT_TYPES = frozenset({_TP.FLOAT, _TP.DOUBLE, _TP.FLOAT16, _TP.BFLOAT16})


def torch_dtype(elem_type: int, where: str) -> torch.dtype:
    """The torch dtype for an ONNX element type, or a FrontendError naming ``where``."""
    try:
        return ONNX_TO_TORCH[elem_type]
    except KeyError:
        name = _TP.DataType.Name(elem_type) if elem_type in _TP.DataType.values() else str(elem_type)
        raise FrontendError(f"{where}: element type {name} is not supported") from None


def tensor_from_proto(proto: onnx.TensorProto, where: str) -> torch.Tensor:
    """A torch tensor holding a copy of an ONNX TensorProto (initializer or attribute)."""
    dtype = torch_dtype(proto.data_type, where)
    if proto.data_location == _TP.EXTERNAL:
        raise FrontendError(f"{where}: tensor data is stored in an external file, which is not supported")
    if proto.data_type == _TP.BFLOAT16:
        arr = numpy_helper.to_array(proto).astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(arr)).to(torch.bfloat16)
    arr = numpy_helper.to_array(proto)
    return torch.from_numpy(np.array(arr, copy=True)).to(dtype)
