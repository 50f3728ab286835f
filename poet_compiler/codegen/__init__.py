"""Code generation from a validated Program: the .poet bytecode and the C sources for the device."""
