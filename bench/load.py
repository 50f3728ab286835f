"""Machine load for a bench: CPU-bound processes beside the runs it measures."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def busy_loops(n: int) -> Iterator[None]:
    """Within the block, ``n`` processes of ``python3 -c 'while True: pass'`` run beside."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
