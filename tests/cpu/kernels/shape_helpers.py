"""What the shape-suite tests share: the arch their plans, defaults and tuning are drawn for (the
per-class config fixture that reloads ``kernels.rules.config`` is in conftest.py)."""
from __future__ import annotations

from spec import get_arch

H100 = get_arch("h100")
