"""A stand-in for ``highspy`` that puts the real one behind two faults, for the tests.

Put ``tests/support/highspy_shim`` first on PYTHONPATH: the HiGHS child process then
imports this package, which loads the real highspy in its place and, by
``POETC_TEST_HIGHSPY``:

- ``banner``: writes a banner to the process's stdout, as highspy 1.16 does on import
  whatever ``output_flag`` says;
- ``raise``: the banner, and ``Highs.run`` raises, as a bug in the child would.

With ``POETC_TEST_HIGHSPY_RAN=PATH``, ``Highs.run`` first writes PATH: the test's proof
that the child was reached.
"""

import importlib
import os
import sys

_shim_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _shim_dir]
del sys.modules[__name__]
_real = importlib.import_module("highspy")
sys.modules[__name__] = _real

_fault = os.environ.get("POETC_TEST_HIGHSPY", "")
if _fault in ("banner", "raise"):
    os.write(1, b"Running HiGHS 1.16.0 (git hash: 0000000): Copyright (c) 2026 under MIT licence terms\n"
                b"Using BLAS: none\n")
_real_run = _real.Highs.run


def _run(self):  # noqa: ANN001, ANN202
    mark = os.environ.get("POETC_TEST_HIGHSPY_RAN")
    if mark:
        with open(mark, "w") as fh:
            fh.write("ran\n")
    if _fault == "raise":
        raise RuntimeError("injected fault in the HiGHS child")
    return _real_run(self)


_real.Highs.run = _run
