"""Converters by op family; importing this package fills the registry in ``context``."""

from . import elementwise, nn, reduce, shape  # noqa: F401  (registration side effects)
