"""``ptxdsl.types``: the public spelling of :mod:`ptxdsl.core.types` (``from ptxdsl.types
import f32, u32``), as in pyptx."""
from .core.types import *  # noqa: F401,F403
from .core.types import __all__  # noqa: F401
