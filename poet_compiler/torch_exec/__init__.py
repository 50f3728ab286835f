"""PyTorch execution of a schedule: the interpreting executor (``training_step()``), the
straight-line Python it writes, the plan PyTorch's own checkpointing and saved-tensor
hooks run (``checkpointed()``), the page file, and the check against autograd."""
