"""HiGHS backend (highspy), run in a child process.

The OR-Tools wheel ships its own copy of HiGHS; loading highspy's into the same process
fails with undefined symbols, whichever is imported first. So the model is pickled to a
fresh interpreter (:mod:`.highs_worker`) that imports highspy only. HiGHS takes the
physical (floating-point) coefficients directly: no scaling.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import time

from poet_compiler.errors import SolverError
from poet_compiler.solve.backends.base import BackendOptions, BackendResult
from poet_compiler.solve.formulation.model import LinearModel


def solve_highs(model: LinearModel, options: BackendOptions) -> BackendResult:
    started = time.perf_counter()
    payload = pickle.dumps((model, options))
    proc = subprocess.run(
        [sys.executable, "-m", "poet_compiler.solve.backends.highs_worker"],
        input=payload, stdout=subprocess.PIPE, stderr=None if options.progress else subprocess.PIPE,
        timeout=options.time_limit_s + 120,
    )
    if proc.returncode != 0:
        err = (proc.stderr or b"").decode(errors="replace").strip().splitlines()
        raise SolverError(f"highs: the solver process failed: {err[-1] if err else 'exit ' + str(proc.returncode)}")
    result: BackendResult = pickle.loads(proc.stdout)
    result.solve_time_s = time.perf_counter() - started
    return result
