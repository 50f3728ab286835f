"""The "train your own model" notebook runs top to bottom and shows the schedule training
a user's module bitwise like autograd, and refusing another batch shape."""

from __future__ import annotations

from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "your_model.ipynb"


def test_your_model_notebook_executes(tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "parameters bitwise equal to autograd: True" in text
    assert "BatchNorm statistics bitwise equal:   True" in text
    assert text.count("step ") >= 3 and "BatchError: input 0 is (8, 3, 12, 12)" in text
