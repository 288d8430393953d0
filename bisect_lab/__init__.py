"""bisect-lab: which patch, commit or environment factor caused a performance regression,
by how much, and how sure we are.

Public API (kept light: heavy modules load on first use, so the pytest plugin and the
CLI start fast)::

    from bisect_lab import attribute_factors, bisect_sequence, load
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["attribute_factors", "bisect_sequence", "BisectVerdict", "load", "__version__"]


def __getattr__(name):
    if name == "attribute_factors":
        # The CLI's `attribute` runs this same strategy (StagedAttribution) on real trials.
        from .strategies.staged import attribute_staged
        return attribute_staged
    if name == "bisect_sequence":
        from .strategies.bisection import bisect_sequence
        return bisect_sequence
    if name == "BisectVerdict":
        from .verdicts import BisectVerdict
        return BisectVerdict
    if name == "load":
        from .store import load
        return load
    raise AttributeError(f"module 'bisect_lab' has no attribute {name!r}")
