"""Data set files for the training-loop firmware, and the digits split of ``make device-train``.

A data set file (read by ``runtime/c/device/train_main.c`` through the storage
callbacks, a semihosting file under QEMU) is a 16-byte header — ``PDS1``, then uint32
n, input bytes per sample, label bytes per sample, little endian — then the n inputs
(float32, C order) and then the n labels (int32). Inputs first and labels after keep a
batch to two contiguous reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from poet_compiler.codegen.emit_c.errors import EmitError

MAGIC = b"PDS1"


@dataclass(frozen=True)
class Split:
    x_train: np.ndarray  # float32 [n, 1, 8, 8]
    y_train: np.ndarray  # int64 [n]
    x_test: np.ndarray
    y_test: np.ndarray

    def only(self, classes: range | list[int]) -> Split:
        """The samples whose label is in ``classes`` (labels unchanged)."""
        keep_tr = np.isin(self.y_train, list(classes))
        keep_te = np.isin(self.y_test, list(classes))
        return Split(self.x_train[keep_tr], self.y_train[keep_tr], self.x_test[keep_te], self.y_test[keep_te])


def to_bytes(x: np.ndarray, y: np.ndarray) -> bytes:
    x = np.ascontiguousarray(x, dtype="<f4")
    y = np.ascontiguousarray(y, dtype="<i4")
    if x.shape[0] != y.shape[0] or y.ndim != 1 or x.shape[0] == 0:
        raise EmitError(f"a data set needs n >= 1 inputs and n labels, got {x.shape[0]} and {y.shape}")
    sample = x[0].nbytes
    head = MAGIC + np.array([x.shape[0], sample, 4], dtype="<u4").tobytes()
    return head + x.tobytes() + y.tobytes()


def write(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    Path(path).write_bytes(to_bytes(x, y))


def read(path: Path, sample_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    raw = Path(path).read_bytes()
    if raw[:4] != MAGIC or len(raw) < 16:
        raise EmitError(f"{path}: not a data set file (no PDS1 header)")
    n, sample, label = (int(v) for v in np.frombuffer(raw[4:16], dtype="<u4"))
    if sample != 4 * int(np.prod(sample_shape)) or label != 4 or len(raw) != 16 + n * (sample + label):
        raise EmitError(f"{path}: {n} samples of {sample} B + {label} B do not match {len(raw)} B "
                        f"and the shape {list(sample_shape)}")
    x = np.frombuffer(raw[16:16 + n * sample], dtype="<f4").reshape(n, *sample_shape)
    y = np.frombuffer(raw[16 + n * sample:], dtype="<i4")
    return x.copy(), y.astype(np.int64)


def digits(seed: int = 0, test_fraction: float = 0.2) -> Split:
    """scikit-learn's 8x8 handwritten digits (1,797 images, shipped in its wheel), scaled
    to [0, 1], split train/test with a fixed seed, stratified by class, shuffled."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise EmitError("the digits data set needs scikit-learn (pip install scikit-learn)") from None
    d = load_digits()
    x = (d.data.astype(np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return Split(x_tr, y_tr, x_te, y_te)
