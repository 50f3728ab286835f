"""Run the int8 C kernels (runtime/c/kernels/int8) on cases: through a host shared library
(the portable C path), or in firmware under QEMU: ``mps2-an386`` (Cortex-M4, the DSP
path) and ``mps2-an385`` (Cortex-M3: no FPU, no DSP extension, the portable path).

One encoding for all three (runtime/c/device/s8_cases.c): a case is a kernel id, int32
parameters and buffers; the results are each case's status, return value, workspace
bytes, timer ticks (instructions under ``-icount``) and output buffers. The expected
values come from the reference (:mod:`poet_compiler.quant.kernel_cases`), never from here.
"""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

import numpy as np

RUNTIME = Path(__file__).resolve().parents[2] / "runtime" / "c"
KERNELS = RUNTIME / "kernels" / "int8"
DEVICE = RUNTIME / "device"
MAGIC = 0x53433853  # "S8CS"
BOARDS = {"m4": "mps2-an386", "m3": "mps2-an385"}
CPU_FLAGS = {"m4": ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"],
             "m3": ["-mcpu=cortex-m3", "-mthumb", "-mfloat-abi=soft"]}
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
ICOUNT_SHIFT = 6
TIMER_NS = 40.0  # the MPS2 boards' 25 MHz CMSDK timer


class Kernel(IntEnum):
    CONV_FWD = 1
    CONV_BWD_INPUT = 2
    CONV_BWD_WEIGHT = 3
    MAXPOOL_FWD = 4
    MAXPOOL_BWD = 5
    AVGPOOL_FWD = 6
    AVGPOOL_BWD = 7
    ADD_FWD = 8
    CLAMP = 9
    ACT_BWD = 10
    GRAD_SUM = 11
    SOFTMAX_CE = 12
    UPDATE_BIAS = 13
    UPDATE_WEIGHT = 14
    NEXT_ACT_EXP = 15
    NEXT_GRAD_EXP = 16
    RESCALE_BIAS = 17
    LOG2Q = 18
    F32_CONV_FWD = 100         # the float32 kernels (runtime/c/kernels/conv.c), in a build with float=True
    F32_CONV_BWD_INPUT = 101
    F32_CONV_BWD_WEIGHT = 102


class Status(IntEnum):
    OK = 0
    GUARD = 1      # the kernel wrote past the workspace its _ws function declared
    UNKNOWN = 2
    ARENA = 3


@dataclass
class Buf:
    """A kernel operand: input data, an output of a shape and dtype, both, or NULL."""

    dtype: np.dtype
    shape: tuple[int, ...]
    data: np.ndarray | None = None
    out: bool = False
    null: bool = False

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def inp(a: np.ndarray) -> Buf:
    a = np.ascontiguousarray(a)
    return Buf(a.dtype, a.shape, a)


def out(shape: tuple[int, ...], dtype: type | np.dtype) -> Buf:
    return Buf(np.dtype(dtype), tuple(shape), None, out=True)


def inout(a: np.ndarray) -> Buf:
    a = np.ascontiguousarray(a)
    return Buf(a.dtype, a.shape, a, out=True)


def null() -> Buf:
    return Buf(np.dtype(np.int8), (0,), None, null=True)


@dataclass
class Case:
    kernel: Kernel
    params: list[int]
    bufs: list[Buf]
    label: str = ""


@dataclass
class Result:
    status: Status
    ret: int
    ws_bytes: int
    ticks: int
    outs: list[np.ndarray] = field(default_factory=list)   # the OUT buffers, in order

    def instructions(self, shift: int = ICOUNT_SHIFT) -> float:
        """Instructions of the kernel call under ``qemu -icount shift`` (0.625 per tick at 6)."""
        return self.ticks * TIMER_NS / (1 << shift)


def _words(values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}i", *[((v + 2**31) % 2**32) - 2**31 for v in values])


def encode(cases: list[Case]) -> bytes:
    chunks = []
    for c in cases:
        chunks.append(_words([int(c.kernel), len(c.params), *c.params, len(c.bufs)]))
        for b in c.bufs:
            flags = (1 if b.data is not None else 0) | (2 if b.out else 0) | (4 if b.null else 0)
            chunks.append(_words([flags, 0 if b.null else b.nbytes]))
            if b.data is not None:
                raw = b.data.astype(b.dtype.newbyteorder("<"), copy=False).tobytes()
                chunks.append(raw + b"\0" * (-len(raw) % 4))
    return b"".join(chunks)


def decode(cases: list[Case], blob: bytes) -> list[Result]:
    results, pos = [], 0
    for c in cases:
        status, ret, ws, ticks = struct.unpack_from("<iiii", blob, pos)
        pos += 16
        outs = []
        for b in c.bufs:
            if b.out and not b.null:
                outs.append(np.frombuffer(blob, b.dtype.newbyteorder("<"), int(np.prod(b.shape)), pos)
                            .reshape(b.shape).copy())
                pos += (b.nbytes + 3) & ~3
        results.append(Result(Status(status), ret, ws, ticks & 0xFFFFFFFF, outs))
    if pos != len(blob):
        raise RuntimeError(f"results: {len(blob)} bytes, the cases account for {pos}")
    return results


def sources() -> list[Path]:
    return sorted(KERNELS.glob("*.c"))


# ---- host -----------------------------------------------------------------------------

class HostKernels:
    """The kernels and the case runner as a host shared library (the portable C path)."""

    def __init__(self, build_dir: Path, cc: str | None = None) -> None:
        cc = cc or shutil.which("gcc") or shutil.which("cc")
        if cc is None:
            raise RuntimeError("no C compiler")
        lib = Path(build_dir) / "libpoet_kernels_s8.so"
        cmd = [cc, *WARNINGS, "-O2", "-shared", "-fPIC", f"-I{KERNELS}", f"-I{DEVICE}",
               *map(str, sources()), str(DEVICE / "s8_cases.c"), "-o", str(lib)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        self.lib = ctypes.CDLL(str(lib))
        self.lib.s8_run_cases.restype = ctypes.c_int32

    def run(self, cases: list[Case], memory: int = 8 << 20) -> list[Result]:
        blob = encode(cases)
        cap = sum(16 + sum((b.nbytes + 3) & ~3 for b in c.bufs if b.out) for c in cases)
        inbuf = ctypes.create_string_buffer(blob, len(blob))
        outbuf = ctypes.create_string_buffer(max(cap, 1))
        mem = ctypes.create_string_buffer(memory)
        n = self.lib.s8_run_cases(inbuf, len(blob), outbuf, cap, mem, memory, None)
        if n < 0:
            raise RuntimeError("s8_run_cases rejected the case stream")
        return decode(cases, outbuf.raw[:n])


# ---- firmware under QEMU ----------------------------------------------------------------

def tools_for(cpu: str) -> bool:
    return cpu in BOARDS and all(shutil.which(t) for t in ("arm-none-eabi-gcc", "qemu-system-arm"))


def build_firmware(build_dir: Path, cpu: str, float_convs: bool = False) -> Path:
    """The case-runner firmware for ``cpu`` ("m4" or "m3"), -O2 (the kernels' -pedantic
    check is the host build's: the startup file's vector table is not ISO C). With
    ``float_convs`` it also runs the float32 convolutions (the F32_* kernels)."""
    elf = Path(build_dir) / f"s8_cases_{cpu}{'_f32' if float_convs else ''}.elf"
    floats = ["-DS8_CASES_FLOAT", f"-I{RUNTIME / 'kernels'}", str(RUNTIME / "kernels" / "conv.c")]
    if not float_convs:
        floats = []
    cmd = ["arm-none-eabi-gcc", *WARNINGS[:-1], "-O2", *CPU_FLAGS[cpu], "-DS8_CASES_MAIN", *floats,
           "-nostartfiles", "-T", str(DEVICE / "mps2_an386.ld"), "--specs=nano.specs", "--specs=nosys.specs",
           f"-I{KERNELS}", f"-I{DEVICE}", *map(str, sources()), str(DEVICE / "s8_cases.c"),
           str(DEVICE / "platform_semihost.c"), str(DEVICE / "startup_m4.c"), "-o", str(elf)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"firmware build failed:\n{proc.stderr}")
    return elf


@dataclass
class FirmwareRun:
    results: list[Result]
    line: str


STREAM_BYTES = 1 << 20   # the firmware's case, result and operand buffers (S8_CASES_BYTES)


def _batches(cases: list[Case]) -> list[list[Case]]:
    """Cases in runs whose streams and results fit the firmware's buffers."""
    out: list[list[Case]] = [[]]
    size = 0
    for c in cases:
        n = len(encode([c])) + 16 + sum(b.nbytes + 4 for b in c.bufs)
        if out[-1] and size + n > STREAM_BYTES - 4096:
            out.append([])
            size = 0
        out[-1].append(c)
        size += n
    return out


def run_firmware(elf: Path, cpu: str, cases: list[Case], work: Path, timeout: float = 600) -> FirmwareRun:
    """Run ``cases`` on the emulated board (semihosting files in ``work``), -icount shift 6,
    in as few runs as the firmware's buffers allow."""
    work.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    line = ""
    for batch in _batches(cases):
        blob = encode(batch)
        (work / "cases.bin").write_bytes(struct.pack("<II", MAGIC, len(blob)) + blob)
        cmd = ["qemu-system-arm", "-M", BOARDS[cpu], "-nographic", "-monitor", "none", "-serial", "none",
               "-semihosting-config", "enable=on,target=native", "-icount", f"shift={ICOUNT_SHIFT}",
               "-kernel", str(Path(elf).resolve())]
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=timeout)
        text = proc.stdout + proc.stderr
        line = next((ln for ln in text.splitlines() if ln.startswith("s8-cases:")), "")
        if proc.returncode != 0 or " ok " not in line + " ":
            raise RuntimeError(f"firmware run failed ({proc.returncode}): {text.strip()[-400:]}")
        results += decode(batch, (work / "results.bin").read_bytes())
    return FirmwareRun(results, line)
