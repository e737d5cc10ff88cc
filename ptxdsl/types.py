"""``ptxdsl.types``: the public spelling of :mod:`ptxdsl.core.types` (``from ptxdsl.types
import f32, u32``), as in pyptx; ``from_name`` is pyptx's name for ``by_name``."""
from .core.types import *  # noqa: F401,F403
from .core.types import __all__ as _core_all
from .core.types import by_name as from_name

__all__ = [*_core_all, "from_name"]
