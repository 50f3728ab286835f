"""Schedule (matrices) -> Program (instructions) -> simulator, and the arena planner."""
