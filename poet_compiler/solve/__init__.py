"""Formulations, solver backends, heuristics and baselines: Problem -> Result."""
