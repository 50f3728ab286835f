"""Code generation from a validated Program: the .poet bytecode (and the PyTorch executor)."""
