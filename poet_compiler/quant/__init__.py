"""Int8 training, the host reference: the executable form of docs/int8.md.

Integer arithmetic only in the step (NumPy int64 arrays holding the spec's int8/int16/int32
values; floats only where scales are fixed, on the host). The C kernels are checked
against this package bit for bit; it shares no code with them.

Modules: ``fixedpoint`` (requantize, rounding, saturation), ``prng`` (the update's
counter-based draws), ``qmodel`` (the quantized model), ``conv``/``pool``/``elementwise``/
``loss``/``update`` (the kernels, forward and backward), ``step`` (the training step),
``float_graph``/``onnx_import``/``calibrate``/``sources`` (where the scales come from).
"""
