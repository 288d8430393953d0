"""The stored nights of a sweep, read back from the results database (layer 3)."""
from __future__ import annotations

from .stats.series import Night

__all__ = ["sweep_history", "sweep_names"]


def sweep_history(store, name: str, metric: str | None = None) -> list[Night]:
    """Every finished night of sweep ``name``, oldest first."""
    from .summaries import positive_metric
    nights = []
    for c in store.campaigns("sweep"):
        if c.params.get("sweep") != name or c.status != "done":
            continue
        m = metric or c.params.get("metric")
        values: dict[str, list[float]] = {}
        failed = 0
        for t in store.trials(c.id):
            if t.tag == "warmup":
                continue
            v = positive_metric(t.metrics.get(m)) if t.ok else None
            if v is not None:
                values.setdefault(t.arm, []).append(v)
            elif not t.ok:
                failed += 1
        nights.append(Night(c.id, c.created, c.params.get("commit"), values, c.result, failed))
    return nights


def sweep_names(store) -> list[str]:
    """Names of the sweeps recorded in a store."""
    return sorted({c.params.get("sweep") for c in store.campaigns("sweep") if c.params.get("sweep")})
