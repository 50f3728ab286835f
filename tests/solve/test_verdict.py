"""Judging an answer (poet_compiler/solve/pipeline/answer.py): the gap a message claims holds."""

from __future__ import annotations

from poet_compiler.solve.pipeline.answer import Answer, Clause, gap_claim, keep_gap_claim_true, says, text, wrap


def _answer(gap: float, message: tuple[Clause, ...]) -> Answer:
    return Answer("feasible", message, None, 1.0 - gap, gap)


def test_a_claim_the_final_gap_breaks_is_replaced_and_the_rest_kept() -> None:
    res = keep_gap_claim_true(_answer(0.0439, gap_claim(1e-3, "the eviction-cover bound")
                                      + says("arena: re-solved 1 time(s)")), 1e-3)
    assert not any(c.gap_claim for c in res.message)
    assert text(res.message).startswith("4.390% above the bound, over the gap limit 0.001")
    assert text(res.message).endswith("; arena: re-solved 1 time(s)")


def test_a_claim_that_holds_is_left_alone() -> None:
    for gap, limit in ((0.00038, 1e-3), (0.001, 1e-3), (0.0, 0.0)):
        message = gap_claim(limit)
        res = keep_gap_claim_true(_answer(gap, message), limit)
        assert res.message == message
    plain = says("stopped at the time limit (60 s)")
    assert keep_gap_claim_true(_answer(0.05, plain), 1e-3).message == plain


def test_a_claim_quoted_inside_another_clause_is_kept_and_noted() -> None:
    """A claim with text before it in its clause (a fallback's "solver: ..." quoting the
    search's message) is no claim of the answer's own: it stays, and the note says the
    gap is over the limit; a claim that still starts a clause is dropped."""
    quoted = wrap("best heuristic schedule (dtr); solver: ", gap_claim(1e-3) + says("arena: x"))
    assert [c.gap_claim for c in quoted] == [False, False, False]
    res = keep_gap_claim_true(_answer(0.01, quoted), 1e-3)
    assert text(res.message) == ("1.000% above the bound, over the gap limit 0.001: a stage reached the limit "
                                 "against its own figures, and the arena's copies or a re-solve at a lower budget "
                                 "cost the rest; best heuristic schedule (dtr); solver: stopped within the relative "
                                 "gap limit 0.001; arena: x")
    closing = wrap("the guided schedule (the solver's did not fit: ", says("arena 9 bytes") + gap_claim(1e-3), ")")
    assert [c.gap_claim for c in closing] == [False, True]
    assert text(keep_gap_claim_true(_answer(0.01, closing), 1e-3).message).endswith(
        "; the guided schedule (the solver's did not fit: arena 9 bytes")
