"""Graphs and valid Programs (with arena offsets) for the bytecode and runtime tests.

The real linearizer and arena planner live elsewhere; these helpers build programs that
obey the simulator's rules (docs/model.md) on their own: a ResNet-like training graph,
and a Belady-style eviction policy under a RAM budget that drops (recomputes) or pages
out activations, with a first-fit arena allocator for offsets.
"""

from __future__ import annotations

import random

from poet_compiler.graph.ir import Node, TrainingGraph
from poet_compiler.schedule.program import Instruction, Op, Program


def training_graph(forward: list[tuple[str, str, list[int], int]], name: str = "g",
                   workspace: int = 0) -> TrainingGraph:
    """Forward nodes (name, op_class, inputs, bytes) + a loss + a mirrored backward pass.

    Backward node of forward node f reads the gradients of f's consumers and f's saved
    inputs (as autograd does for conv/matmul), and produces a gradient of f's size.
    """
    nodes: list[Node] = []
    for i, (nm, cls, ins, size) in enumerate(forward):
        nodes.append(Node(i, nm, "forward", f"aten.{cls}", cls, tuple(ins), size,  # type: ignore[arg-type]
                          workspace_bytes=workspace if cls == "conv" else 0))
    nf = len(forward)
    nodes.append(Node(nf, "loss", "loss", "aten.nll_loss", "reduction", (nf - 1,), 4))
    consumers: list[list[int]] = [[] for _ in range(nf)]
    for i, (_, _, ins, _) in enumerate(forward):
        for j in ins:
            consumers[j].append(i)
    grad_of: dict[int, int] = {}
    for f in reversed(range(nf)):
        gid = len(nodes)
        ins = [grad_of[c] for c in consumers[f]] or [nf]
        ins += [j for j in forward[f][2]]
        nm, cls, _, size = forward[f]
        nodes.append(Node(gid, f"{nm}_bwd", "backward", f"aten.{cls}_backward", cls,  # type: ignore[arg-type]
                          tuple(sorted(set(ins))), size))
        grad_of[f] = gid
    return TrainingGraph(name=name, nodes=tuple(nodes))


def chain_graph(n_forward: int, size: int = 1024) -> TrainingGraph:
    fwd = [(f"l{i}", "elementwise", [i - 1] if i else [], size * (1 + i % 3)) for i in range(n_forward)]
    return training_graph(fwd, name=f"chain{n_forward}")


def resnet18_cifar_graph() -> TrainingGraph:
    """ResNet-18 for CIFAR-10 at batch 1, fp32: conv/bn/relu per layer, 4 stages x 2 blocks."""
    fwd: list[tuple[str, str, list[int], int]] = []

    def add(name: str, cls: str, ins: list[int], size: int) -> int:
        fwd.append((name, cls, ins, size))
        return len(fwd) - 1

    x = add("conv1", "conv", [], 64 * 32 * 32 * 4)
    x = add("bn1", "norm", [x], 64 * 32 * 32 * 4)
    x = add("relu1", "elementwise", [x], 64 * 32 * 32 * 4)
    ch, hw = 64, 32
    for stage, out_ch in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if (stage > 0 and block == 0) else 1
            o_hw = hw // stride
            size = out_ch * o_hw * o_hw * 4
            p = f"layer{stage + 1}.{block}"
            y = add(f"{p}.conv1", "conv", [x], size)
            y = add(f"{p}.bn1", "norm", [y], size)
            y = add(f"{p}.relu1", "elementwise", [y], size)
            y = add(f"{p}.conv2", "conv", [y], size)
            y = add(f"{p}.bn2", "norm", [y], size)
            s = x
            if stride != 1 or out_ch != ch:
                s = add(f"{p}.shortcut.conv", "conv", [x], size)
                s = add(f"{p}.shortcut.bn", "norm", [s], size)
            y = add(f"{p}.add", "elementwise", [y, s], size)
            x = add(f"{p}.relu2", "elementwise", [y], size)
            ch, hw = out_ch, o_hw
    x = add("avgpool", "reduction", [x], 512 * 4)
    add("fc", "matmul", [x], 10 * 4)
    return training_graph(fwd, name="resnet18_cifar")


class FirstFit:
    """First-fit allocator over a free list: deterministic offsets, high-water arena."""

    def __init__(self, align: int = 16) -> None:
        self.align = align
        self.live: dict[int, tuple[int, int]] = {}
        self.high = 0

    def alloc(self, node: int, size: int) -> int:
        size = -(-size // self.align) * self.align
        at = 0
        for start, end in sorted(self.live.values()):
            if at + size <= start:
                break
            at = max(at, end)
        self.live[node] = (at, at + size)
        self.high = max(self.high, at + size)
        return at

    def free(self, node: int) -> None:
        del self.live[node]


def budget_program(graph: TrainingGraph, budget: int | None = None, *, paging: bool = True,
                   offsets: bool = True, seed: int = 0) -> Program:
    """A valid Program computing every node in order, evicting under ``budget`` bytes.

    Eviction is Belady-like (farthest next use first); an evicted tensor is paged out
    (when ``paging`` and a coin says so) or dropped and recomputed when next needed.
    """
    rng = random.Random(seed)
    n, cons, sizes = graph.n, graph.consumers, [nd.output_bytes for nd in graph.nodes]
    ins_of = [nd.inputs for nd in graph.nodes]
    out: list[Instruction] = []
    ff = FirstFit()
    resident: dict[int, int] = {}
    flash: set[int] = set()

    def emit(op: Op, node: int = -1, off: int | None = None) -> None:
        out.append(Instruction(op, node, off if offsets else None))

    def bring(i: int, pinned: set[int]) -> None:
        if i in resident:
            return
        if i in flash:
            resident[i] = ff.alloc(i, sizes[i])
            emit(Op.PAGE_IN, i, resident[i])
            emit(Op.FENCE)
            return
        for j in ins_of[i]:
            bring(j, pinned | {i})
        resident[i] = ff.alloc(i, sizes[i])
        emit(Op.COMPUTE, i, resident[i])

    def free(i: int) -> None:
        emit(Op.FREE, i, resident.pop(i))
        ff.free(i)

    for t in range(n):
        need = set(ins_of[t])
        for i in sorted(need):
            bring(i, need)
        resident[t] = ff.alloc(t, sizes[t])
        emit(Op.COMPUTE, t, resident[t])
        # Free recompute temporaries and everything without a future reader.
        for i in sorted(resident):
            if i != n - 1 and not any(c > t for c in cons[i]):
                free(i)
        if budget is None:
            continue
        live = sum(sizes[i] for i in resident)
        while live > budget:
            cands = [i for i in resident if i != n - 1 and any(c > t for c in cons[i])]
            if not cands:
                break
            victim = max(cands, key=lambda i: (min(c for c in cons[i] if c > t), i))
            if paging and victim not in flash and rng.random() < 0.5:
                emit(Op.PAGE_OUT, victim, resident[victim])
                emit(Op.FENCE)
                flash.add(victim)
            free(victim)
            live -= sizes[victim]
    arena = ff.high if offsets else None
    return Program(n_nodes=n, instructions=tuple(out), arena_bytes=arena)


def peak_live_bytes(program: Program, graph: TrainingGraph) -> int:
    """Reference peak of docs/model.md: at every COMPUTE, allocated bytes + workspace."""
    live: set[int] = set()
    peak = 0
    for ins in program:
        if ins.op in (Op.COMPUTE, Op.PAGE_IN):
            live.add(ins.node)
            if ins.op is Op.COMPUTE:
                peak = max(peak, sum(graph.nodes[i].output_bytes for i in live)
                           + graph.nodes[ins.node].workspace_bytes)
        elif ins.op is Op.FREE:
            live.discard(ins.node)
    return peak


def checkpoint_all_peak(graph: TrainingGraph) -> int:
    return peak_live_bytes(budget_program(graph, None), graph)
