"""Device profiles, the cost model and the host profiler."""
