"""Bytecode benchmark: .poet size and C-runtime agreement over the zoo.

For every zoo model at 30/50/70 % of its checkpoint-all peak on the m4 profile, compile
with ``--strategy`` (default ``optimal`` with ``--time-limit``); when that strategy
returns no schedule in time, the ``--fallback`` heuristics are tried in order and the
table says which one produced the schedule (``-`` if the budget is infeasible for every
strategy tried). Each schedule is encoded stripped and unstripped, decoded again
(must round-trip) and run through the C harness (``runtime/c``): the trace must equal
the Python Program and the harness's peak must equal the simulator's.

Prints two Markdown tables: per cell (instructions, bytes stripped/unstripped, bytes per
instruction, the section bytes, allocations through the offset table, C trace match)
and the C runtime's code size from ``make size`` (host; Cortex-M4/M0+ when
arm-none-eabi-gcc is installed).

    make bench-bytecode          # BENCHMARKS.md, "Bytecode size": the zoo's small models, 10 s each
    .venv/bin/python bench/bytecode_bench.py --quick          # kws_dscnn at 70 % alone

``--models resnet18_cifar,kws_dscnn --ram 0.5`` narrows the grid; ``--batch N`` overrides
every model's default batch.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from poet_compiler.api import compile
from poet_compiler.codegen.bytecode import VERSION, decode, encode
from poet_compiler.fileio import atomic_write_text
from poet_compiler.frontends import zoo_names
from poet_compiler.schedule.simulate import simulate

RUNTIME = Path(__file__).resolve().parents[1] / "runtime" / "c"
RAM_FRACTIONS = (0.3, 0.5, 0.7)
HEAD = ("model", "nodes", "budget", "strategy", "status", "instructions", "stripped B", "unstripped B",
        "B/instr", "sizes", "workspace", "offsets", "code", "via table", "C trace")


def build_harness(build: Path) -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or shutil.which("make") is None:
        return None
    subprocess.run(["make", "-s", "-C", str(RUNTIME), f"BUILD={build}", f"CC={cc}", "all"], check=True,
                   capture_output=True, text=True)
    return build / "harness"


def code_size(build: Path) -> list[tuple[str, int, int]]:
    """(target, text, data) of the runtime object from ``make size``."""
    proc = subprocess.run(["make", "-s", "-C", str(RUNTIME), f"BUILD={build}", "size"], capture_output=True,
                          text=True, check=True)
    out = []
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+\w+\s+\S*poet_runtime_(\w+)\.o", line)
        if m:
            target = {"os": "host x86-64 (cc -Os)", "m4": "Cortex-M4 (-Os -mthumb)",
                      "m0": "Cortex-M0+ (-Os -mthumb)"}[m.group(4)]
            out.append((target, int(m.group(1)), int(m.group(2))))
    return out


def c_trace_matches(harness: Path | None, c, data: bytes, tmp: Path) -> str:
    """'yes' when the harness's trace and peak equal the Program's and the simulator's."""
    if harness is None:
        return "no C compiler"
    path = tmp / "bench.poet"
    path.write_bytes(data)
    proc = subprocess.run([str(harness), str(path)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return f"no (exit {proc.returncode}: {proc.stderr.strip()[:60]})"
    lines = proc.stdout.splitlines()
    trace = [ln for ln in lines if not ln.startswith("#")]
    figs = dict(ln[2:].split(" ", 1) for ln in lines if ln.startswith("# "))
    if trace != [str(i) for i in c.result.program]:
        return "no (trace differs)"
    if int(figs["peak_live_bytes"]) != simulate(c.graph, c.costs, c.result.program).peak_bytes:
        return "no (peak differs)"
    return "yes"


def cell(model: str, frac: float, args: argparse.Namespace, harness: Path | None, tmp: Path) -> list[str]:
    ram = f"{round(frac * 100)}%"
    c = None
    used = "-"
    for strategy in (args.strategy, *[s for s in args.fallback.split(",") if s]):
        c = compile(model, "m4", ram=ram, strategy=strategy, time_limit_s=args.time_limit, threads=args.threads,
                    batch=args.batch)
        if c.result.program is not None:
            used = strategy
            break
    assert c is not None
    if c.result.program is None:
        return [model, str(c.graph.n), ram, used, c.result.status] + ["-"] * (len(HEAD) - 5)
    program = c.result.program
    rep: dict = {}
    stripped = encode(program, c.graph, strip=True, report=rep)
    full = encode(program, c.graph)
    assert decode(stripped).program == decode(full).program == program, "round trip failed"
    n = len(program)
    return [model, str(c.graph.n), ram, used, c.result.status, str(n), f"{len(stripped):,}", f"{len(full):,}",
            f"{len(stripped) / n:.2f}" if n else "-", str(rep["sizes_bytes"]), str(rep["workspace_bytes"]),
            str(rep["offsets_bytes"]), str(rep["code_bytes"]),
            f"{rep['allocations'] - rep['placed']}/{rep['allocations']}", c_trace_matches(harness, c, full, tmp)]


def markdown(head: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(zoo_names()), help="comma-separated zoo names")
    ap.add_argument("--ram", default=",".join(str(f) for f in RAM_FRACTIONS),
                    help="fractions of the checkpoint-all peak")
    ap.add_argument("--strategy", default="optimal")
    ap.add_argument("--fallback", default="chen_greedy,capuchin", help="tried in order when --strategy finds nothing")
    ap.add_argument("--time-limit", type=float, default=20.0, help="solver time limit per cell (s)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=None, help="override every model's default batch")
    ap.add_argument("--out", "-o", type=Path, default=None, help="also write the Markdown here")
    ap.add_argument("--quick", action="store_true", help="the smallest cell: kws_dscnn at 70 %%, 5 s limit")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.ram, args.time_limit = "kws_dscnn", "0.7", 5.0

    rows = []
    with tempfile.TemporaryDirectory(prefix="poet_bc_bench_") as tmpdir:
        tmp = Path(tmpdir)
        harness = build_harness(tmp / "build")
        for model in args.models.split(","):
            for frac in (float(f) for f in args.ram.split(",")):
                t0 = time.perf_counter()
                rows.append(cell(model, frac, args, harness, tmp))
                print(f"{model} {frac:.0%}: {' '.join(rows[-1][3:9])} ({time.perf_counter() - t0:.1f} s)",
                      file=sys.stderr, flush=True)
        sizes = code_size(tmp / "build") if harness is not None else []
    text = f"`.poet` format version {VERSION}\n\n" + markdown(HEAD, rows)
    text += "\n" + markdown(("C runtime (poet_runtime.o)", "text B", "data B"),
                            [[t, f"{a:,}", str(b)] for t, a, b in sizes])
    print(text)
    if args.out is not None:
        atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
