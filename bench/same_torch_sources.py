"""Same PyTorch execution? The sources and plans two checkouts generate for the same
models, their sha256 side by side.

    PYTHONPATH=. .venv/bin/python bench/same_torch_sources.py --before HEAD~1        # against the parent
    PYTHONPATH=. .venv/bin/python bench/same_torch_sources.py --before main -o bench/results/same_torch_sources

A refactor of the PyTorch execution code changes none of what it generates. Each checkout
compiles each case in a fresh process (the same deterministic effort, so the same
schedule: its sha256 is a column too, so that a difference is placed) and hashes what the
public API hands out (where a text differs, its first changed lines are printed too):

- ``schedule``: the Program (``Compilation.program``'s instructions);
- ``pygen``: ``training_step()``'s straight-line Python (the executor's ``source()``);
- ``plan``: the plan ``checkpointed()`` runs (``m.plan``: regions with their ops and
  recomputed ops, paged nodes, prefetches, notes, the ops the schedule recomputes, its
  Program and simulated figures);
- ``forward`` / ``compiled``: the forward ``checkpointed()`` generates, eager and for
  ``torch.compile``.

Cases: tests/api/usermodel.py's ``TinyResNet`` at 30 % RAM on m4 and on a72, and the
``gpt2_tiny`` zoo model at 50 % on m4. ``--before``/``--after`` are git revisions (exported
with ``git archive``, as ``bench/same_bytes.py`` does) or ``.``. Exits 1 when a digest differs.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rows import write_rows  # noqa: E402
from bench.same_sources import checkouts, revision_parser  # noqa: E402

CASES = ("tinyresnet_m4_30", "tinyresnet_a72_30", "gpt2_tiny_m4_50")
DIGESTS = ("schedule", "pygen", "plan", "forward", "compiled")

# Run by each checkout in its own process: only the public API, which both sides share.
_CHILD = r"""
import json, sys
import torch
import poet_compiler

def program_text(program):
    return "\n".join(repr(ins) for ins in program.instructions)

case = sys.argv[1]
common = dict(effort="quick", threads=2, time_limit_s=600)
if case.startswith("tinyresnet"):
    from tests.api.usermodel import TinyResNet, batch
    torch.manual_seed(0)
    model = TinyResNet().train()
    x, y = batch(0)
    device = case.split("_")[1]
    c = poet_compiler.compile(model, device, "30%", example_inputs=(x,), target=y,
                              loss_fn=torch.nn.functional.cross_entropy, **common)
else:
    c = poet_compiler.compile("gpt2_tiny", "m4", "50%", **common)
step = c.training_step()
m = c.checkpointed()
plan = m.plan
plan_text = "\n".join([
    *(repr((r.ops, sorted(r.recompute), r.rng)) for r in plan.regions),
    repr(sorted(plan.paged)), repr(plan.dma), repr(sorted(plan.prefetch.items())),
    repr(plan.source_recomputes), repr(sorted(plan.schedule_recompute)), repr(plan.notes),
    program_text(plan.program), json.dumps(plan.summary(), sort_keys=True, default=str),
])
with open(sys.argv[2], "w") as out:
    json.dump({"schedule": program_text(c.program), "pygen": step._step.source(), "plan": plan_text,
               "forward": m.source, "compiled": m._compiled_src}, out)
step.close()
m.close()
"""


def texts(root: Path, case: str) -> dict[str, str]:
    """What the checkout at ``root`` generates for ``case`` (by :data:`DIGESTS`), in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(root))
    with tempfile.TemporaryDirectory(prefix="poetc-torch-sources-") as tmp:
        path = Path(tmp) / "texts.json"
        proc = subprocess.run([sys.executable, "-c", _CHILD, case, str(path)], cwd=root, env=env,
                              capture_output=True, text=True, check=False)
        if proc.returncode:
            raise SystemExit(f"{case} failed in {root}:\n{proc.stderr[-2000:]}")
        return json.loads(path.read_text())


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def changed_lines(a: str, b: str, most: int = 6) -> list[str]:
    """The first ``most`` changed lines of ``a`` -> ``b`` (a unified diff without context)."""
    diff = difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")][:most]


def main() -> int:
    ap = revision_parser(__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    before, after = checkouts(args)
    rows, same_all = [], True
    for case in args.cases.split(","):
        a, b = texts(before, case), texts(after, case)
        for what in DIGESTS:
            same = a[what] == b[what]
            same_all &= same
            rows.append({"case": case, "what": what, "before": _sha(a[what]), "after": _sha(b[what]), "same": same,
                         "changed": [] if same else changed_lines(a[what], b[what])})
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        names = [r if r != "." else "the working tree" for r in (args.before, args.after)]
        write_rows(args.out, rows, [
            f"# Same PyTorch execution: {names[0]} against {names[1]} (bench/same_torch_sources.py)", "",
            "sha256 of the schedule, training_step()'s Python, checkpointed()'s plan and forwards "
            "(first 12 hex digits).", ""], [
            ("case", lambda r: r["case"]), ("what", lambda r: r["what"]),
            ("before", lambda r: r["before"][:12]), ("after", lambda r: r["after"][:12]),
            ("same", lambda r: "yes" if r["same"] else "**no**")])
    print("the same sources and plans in every case" if same_all else "DIFFERENT: see the rows above", flush=True)
    return 0 if same_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
