"""The stages of ``strategy="optimal"``, in the order its driver (:mod:`..milp`) runs them.

- :mod:`.context`: the frozen :class:`~.context.Context` every stage takes (problem,
  options, tuning, the effort's clock, the replaceable :class:`~.context.Steps`);
  :mod:`.steps`: the real calls, :data:`~.steps.STEPS`;
- :mod:`.proofs`: quick proofs of infeasibility, and the explanation of one found later;
- :mod:`.incumbents`: the heuristics' schedules (:class:`~.incumbents.Incumbents`), and
  the fallback to them;
- :mod:`.bounds`: the eviction cover and the presence model (:class:`~.bounds.Bounds`);
- :mod:`.improvement`: the guided stage (:mod:`.guided_stage`: the guided search and the
  deep cover), then the full model (:mod:`.full_model`);
- :mod:`.arena`: the retries below an arena that did not fit (:class:`~.arena.Tries`);
- :mod:`.judge`: the family's answer against the full-budget bound and the incumbents;
- :mod:`.answer`: what stages answer with (:class:`~.answer.Answer`) and how answers are
  judged; :mod:`.report`: the Result, built once.

A new stage is a module here with a function ``(Context, ...) -> a frozen outcome``, called
from the driver; a constant it needs is a field of :class:`~..tuning.Tuning` (with what
set it), a call a test must replace a field of :class:`~.context.Steps` (its real value
in :data:`~.steps.STEPS`).
"""
