"""Every tuning constant of ``strategy="optimal"`` in one frozen value, each with what set
it (docs/optimizer.md, "Constants", tables them; ``bench/solve_size.py`` counts them).

A constant here trades the schedule's quality against work: a share of the effort, a
depth, a size above which a stage is skipped. The stages read them from the
:class:`Tuning` in their context (:mod:`poet_compiler.solve.pipeline.context`), so a test
or a bench passes its own instead of patching a module (``Tuning(max_arena_retries=20)``;
``bench/ablation.py``'s ``NAME=VALUE``); a function outside the pipeline that takes one
(``cover_bound``, ``finalize``, the infeasibility analysis of ``solve/feasibility.py``)
defaults to :data:`TUNING`, and the pipeline passes its own. Only the heuristics, which
take a Problem alone, read :data:`TUNING` itself. Two switches serve the ablation
(``deep_cover``, ``widen``); at their defaults the pipeline runs every stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from poet_compiler.solvers.model import LinearModel


@dataclass(frozen=True)
class Tuning:
    # -- the problem's size ---------------------------------------------------------------
    # Graphs of at most this many nodes are small: the exhaustive treatment is cheap for them.
    # ``solve_milp`` closes their gap (0.1 % above), searches both program families on DMA
    # devices (on kws_dscnn, 75 nodes, a72 30 %, the two families' union ended at 0.0607 J in
    # 66 s for a 30 s limit where the stage-long family alone reached 0.0484 J in 30 s), and
    # the infeasibility analysis solves for their exact least RAM even when one node's working
    # set already rules the budget out (a second or more on op-level graphs).
    small_graph_nodes: int = 40
    # The stage-long family's share of the time limit when both are searched.
    # Measured (bench/semantics_bench.py, kws_dscnn a72 30 %): at 0.5 the stage-long family
    # lost 15 % energy to the shorter search; the synchronous family mostly needs little time
    # (it is warm-started from the first family's schedule).
    stage_family_share: float = 0.75

    # -- every stage ------------------------------------------------------------------------
    # Below this much work left (after the finalize reserve) no new solver stage starts. At 0.05
    # and at 1.0 no cell of the constants sweep changed (docs/optimizer.md, "Constants").
    min_stage_s: float = 0.2
    # The share of --time-limit by which the search ends before it: a CP-SAT call stopped by
    # its wall limit returned 0.17-0.29 s past it beside two busy loops (ResNet-18-CIFAR at
    # --time-limit 8, MobileNetV2 at 10), so that compiles ended 4-6 % past the limit.
    wall_margin: float = 0.025
    # ... of the time left after this reserve per node for finalizing its schedule (arena
    # planning, simulation), which nothing else leaves it: measured 1.07 s on gpt2_large (1,567
    # nodes), 1.04 s on DAG 1,000 and 0.73 s on DAG 500; without it a compile at
    # --time-limit 20 finalized 1.1 s past the limit. The wall cap keeps the same reserve.
    finalize_s_per_node: float = 1e-3

    # -- incumbents -------------------------------------------------------------------------
    # The warm starts' heuristics stop at this share of the effort (quick ones first; see
    # warm_start.QUICK_FIRST), and a re-solve's at this share of what is left: capuchin alone
    # took 51 s on gpt2_large at seq 512, so a compile at --time-limit 20 ended after 83 s.
    # The cover and the guided search need the rest. At 0.2 no cell of the constants sweep
    # changed (docs/optimizer.md, "Constants").
    warm_start_share: float = 0.4
    # At most this many nodes in a candidate's evicted neighbourhood are summed (belady): a
    # bound on one candidate's work (belady takes 0.55 s on gpt2_large's 1,567 nodes), not
    # compared with other values.
    neighbourhood_cap: int = 64

    # -- bounds -----------------------------------------------------------------------------
    # The most effort one cover solve gets (and at most a quarter of what its caller has
    # left): it closes in under a second on the zoo; the cap is for graphs where it does not.
    cover_limit_s: float = 10.0
    # Seconds to build one absence literal of the refined cover (measured: 6.6 us on
    # gpt2_large, 232k literals in 1.5 s; doubled for slower machines).
    absence_literal_s: float = 1.5e-5
    # How deep the *deep* refined cover (cover.deeper_cover) follows dead inputs of dead
    # inputs (a batch norm's output under an add under a ReLU is depth 2 on ResNet-18). The
    # cover itself follows one level: its restores guide the schedules, and with the chains
    # they paged where the schedules recompute (ResNet-18-CIFAR a72 30 % 1.5x: the guided
    # search stayed at 51.65 J, where it reaches 44.71 J from the one-level choice).
    dead_depth: int = 3
    # The deep cover charges the paging time that outlasts its stage (solve/exposure.py) only
    # where the guided schedule is this far above the cover bound. It raised the bound where
    # that gap was wide (VGG16-CIFAR a72 30 %: 4.8 %, 24.80 -> 25.74 J; ResNet-18-CIFAR a72
    # 30 %: 1.3 %, 44.188 -> 44.214 J), and only slowed the deep model where it was narrow
    # (ResNet-18-CIFAR a72 50 % 1.5x: 0.6 %, the same 44.025 J, closed at 15.8 s instead of
    # 5.7 s, and the cell ended dearer; BENCHMARKS.md, "Optimizer grid").
    exposure_min_gap: float = 0.01
    # Above this many (tensor, point) pairs the presence model is not built: ResNet-18-CIFAR
    # at op level has 13,070, the README demo 2,793 (both measured and solved, BENCHMARKS.md,
    # "Optimizer grid").
    presence_max_pairs: int = 40_000
    # Of the work left after the cover, what the presence bound may take. The README demo
    # closes its bound in 1.3 deterministic s (0.4 of the default effort left is 12; the
    # demo cell of bench/same_bytes.py reports it, stage_effort.presence). Against 0.6 on the
    # ablation's cells (docs/optimizer.md, "Constants"): DAG 100 at 80 % -12.2 %,
    # ResNet-18-CIFAR m4 30 % 1.5x -0.78 %, DAG 250 at 90 % -0.76 %, ResNet-18-CIFAR m4 50 %
    # 1.5x +0.50 %, the rest the same.
    presence_share: float = 0.4

    # -- improvement ------------------------------------------------------------------------
    # The guided search's share of the effort left; the full model gets the rest when the
    # guided schedule is not yet within the gap limit of the cover bound. Swept (docs/
    # optimizer.md, "Constants"): 0.6 and 0.9 are each cheaper on some cells and dearer on
    # others (0.6: DAG 100 at 80 % 6.6 % dearer; 0.9: VGG16-CIFAR a72 50 % 2.0x 0.14 % dearer).
    guided_share: float = 0.75
    # Above full_model_max_nodes the guided stage gets this share of the time left: nothing
    # comes after it but finalizing (arena planning) its schedule.
    large_guided_share: float = 0.9
    # How deep the inputs of a chosen recompute may be recomputed with it in the first
    # sub-problem (1: its inputs; 2: their inputs too). Swept at the default effort
    # (docs/optimizer.md, "Constants"): at 1 ResNet-18-CIFAR m4 50 % 1.5x is 0.53 % and a72
    # 30 % 2.0x 0.60 % cheaper, five other cells the same, but on the whole grid a72 30 % 1.5x
    # is 1.6 % dearer; at 3 DAG 100 at 80 % is 1.97 % dearer.
    cascade_depth: int = 2
    # A sub-problem that closes short of the gap is followed by wider ones, each with one
    # level deeper of inputs recomputed with a chosen node, up to this many. Without them
    # BERT-base a72 70 % is 0.04 % dearer (docs/optimizer.md, "Ablation"), ResNet-18-CIFAR a72
    # 70 % 1.5x 43.8915 J after 18.9 units instead of 43.8872 J after 7.6, a72 50 % 1.5x
    # 0.10 % dearer; at 1 no cell of the constants sweep changed.
    wider_cascades: int = 2
    # Above this many nodes the stage model (n^2 variables: 8.4 GB on BERT-base's 578) is not
    # built when the guided stage has a schedule: the guided sub-problem gives the schedule,
    # the eviction cover the bound (the memory limit: --memory-limit).
    full_model_max_nodes: int = 400
    # The full model is built only when its forecast memory with poetc's own is at most this
    # share of --memory-limit: the forecast is fitted on 30 s solves and a solver's memory
    # grows as it searches, and the limit stops the solver, losing the time it had. Where the
    # forecast is largest the full model pays least: on MobileNetV2 (362 nodes, a72 50 %,
    # forecast 3.9 GiB) it ran 43 s, measured 3.7 GiB and did not improve the guided schedule;
    # without it, the same schedule in 40 s instead of 83 s and 0.96 GiB (BENCHMARKS.md,
    # "Scale"). The ResNet-18 (1.7 GiB) and DAG 250 (2.3 GiB) models still run.
    full_model_memory_share: float = 0.75
    # The full model after the guided stage of a large graph only with at least this much
    # time left (after reserving what finalizing its schedule will take): on ResNet-18-CIFAR, CP-SAT
    # spent 5 s loading the model whatever its limit, and overran the time limit by that.
    min_full_solve_s: float = 5.0
    # Share of the effort left that the full model's first round may use: when its solution
    # breaks a memory row, the rounds after it need effort too. At 0.3 and at 0.8 DAG 250 at
    # 90 % is 0.23 % cheaper and every other cell of the constants sweep the same
    # (docs/optimizer.md, "Constants"): one cell, so it stays.
    first_round_share: float = 0.5
    # Models with more binaries than this get CP-SAT's cheaper presolve (solvers/cpsat.py: on
    # ResNet-18-CIFAR's full model the default presolve loops took ~29 s). Every full model of
    # the zoo is above it (the README demo's has 13,005 binaries, ResNet-18-CIFAR m4 50 %'s
    # 62,371: bench/results/full_model_memory.jsonl); the tests' small graphs are below.
    large_model_binaries: int = 5000

    # -- arena and finalize -----------------------------------------------------------------
    # Fragmentation feedback: re-solves with a budget lowered by the arena's overshoot (at
    # least below the peak of the schedule that did not fit), while effort is left. No cell of
    # the grid, the scale runs or the DAGs re-solved (compaction kept every schedule); where
    # compaction cannot (tests/solve/test_arena_rescue.py), a reserve that left no schedule is
    # halved, so 8 re-solves narrow it to 1/256 of the first overshoot.
    max_arena_retries: int = 8
    # Arena effort when the first layout exceeds the budget: 16 perturbed orders, 17x the
    # local moves, 2x the exact packing's deterministic time. More time did not pay for the
    # time it takes: the packing of a near-budget program is chaotic (one ResNet-18-CIFAR
    # schedule fitted with 2 of 12 CP-SAT seeds at fine address units) and deterministic
    # time accrues at ~6 wall seconds per second there; coarse units fit it (arena_bench).
    arena_retry_effort: int = 16
    # A last step gets at least this much effort even when the effort is spent: compaction
    # (it keeps a schedule whose live bytes fit), the arena of the only schedule left to answer
    # with (greedy layouts alone fragment), and the infeasibility analysis after a solve that
    # proved infeasibility at its end (the message needs the least RAM or deadline). Each
    # takes milliseconds to a second on the zoo.
    last_step_min_s: float = 0.5
    # The most effort one quick search of the infeasibility analysis gets: the smallest
    # deadline when the RAM, not the deadline, is the reason (a side note), and the cover's
    # schedule at the least RAM's lower bound. Both end in well under a second on the zoo.
    quick_search_s: float = 5.0

    # -- switches for bench/ablation.py (docs/optimizer.md, "Ablation") ----------------------
    # The deep cover (cover.deeper_cover) after the guided search.
    deep_cover: bool = True
    # Wider guided sub-problems after the first, where the caller allows them.
    widen: bool = True

    def small(self, nodes: int) -> bool:
        """A graph of ``nodes`` nodes is small: at most :attr:`small_graph_nodes`."""
        return nodes <= self.small_graph_nodes

    def cover_limit(self, left: float) -> float:
        """The effort a caller with ``left`` to spend gives one cover solve."""
        return min(self.cover_limit_s, left / 4)

    def large_model(self, model: LinearModel) -> bool:
        """A model of more than :attr:`large_model_binaries` binaries (cheaper presolve)."""
        return sum(1 for k in model.kind if k == "bin") > self.large_model_binaries


#: The tuning every compile uses.
TUNING = Tuning()
