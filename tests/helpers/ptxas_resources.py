"""A kernel's ptxas resources in tests that skip where ptxas is not installed."""
from __future__ import annotations

import pytest


def resources_or_skip(kernel):
    """``kernel.resources()``, or a skip naming the missing ptxas (any other error raises)."""
    try:
        return kernel.resources()
    except Exception as e:  # no ptxas on this machine
        if "ptxas" in str(e).lower() and "not found" in str(e).lower():
            pytest.skip(str(e))
        raise
