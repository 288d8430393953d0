"""The one JSON cleaning of the package (layer 1, pure).

Results, verdicts and stored rows all pass through :func:`jsonable` before they become JSON, so
that every reader (``--json``, the results database, reports) sees the same thing: NaN and
infinities as ``null`` (strict JSON parsers reject ``NaN``), tuples as lists, sets as sorted lists,
objects with ``to_dict()`` as their dict, paths as strings.
"""
from __future__ import annotations

import math
from pathlib import PurePath

__all__ = ["jsonable", "finite_or_none"]


def finite_or_none(x) -> float | None:
    """``x`` as a float when it is a finite number, else None."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def jsonable(v):
    """``v`` made JSON-able (see the module docstring); dict keys become strings."""
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if hasattr(v, "to_dict"):
        return jsonable(v.to_dict())
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted(jsonable(x) for x in v)
    if isinstance(v, PurePath):
        return str(v)
    if hasattr(v, "item") and callable(v.item):      # numpy scalars
        return jsonable(v.item())
    return str(v)
