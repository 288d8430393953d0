"""``bisect-lab diff A B``: what differed between two measurements (layer 4).

A and B are trials (``CAMPAIGN:TRIAL``) or campaigns (``CAMPAIGN``; the campaign's
first successful trial stands for its conditions). The answer to "was the 94 tok/s
run measured under the same conditions?".
"""
from __future__ import annotations

from collections import Counter

from .errors import UsageError
from .fingerprint import diff as fp_diff
from .model import TrialResult


def _pick(store, ref: str) -> tuple[object, TrialResult | None, list[TrialResult]]:
    cid, _, idx = ref.partition(":")
    camp = store.campaign(cid)
    trials = store.trials(camp.id)
    if idx:
        try:
            i = int(idx)
        except ValueError:
            raise UsageError(f"bad trial reference {ref!r}: expected CAMPAIGN:TRIAL with a trial number") from None
        match = [t for t in trials if t.trial == i]
        if not match:
            raise UsageError(f"campaign {camp.id} has no trial {i} (it has {len(trials)})")
        return camp, match[0], [match[0]]
    ok = [t for t in trials if t.ok]
    return camp, (ok[0] if ok else (trials[0] if trials else None)), trials


def _metric_summary(trials: list[TrialResult]) -> dict:
    import statistics
    by: dict[str, dict[str, list[float]]] = {}
    for t in trials:
        if t.ok:
            for k, v in t.metrics.items():
                if isinstance(v, (int, float)) and v == v:
                    by.setdefault(t.arm, {}).setdefault(k, []).append(float(v))
    return {arm: {k: {"n": len(v), "median": statistics.median(v)} for k, v in ms.items()}
            for arm, ms in by.items()}


def diff_runs(store, a: str, b: str) -> dict:
    """Configuration and fingerprint differences between two trials or campaigns."""
    ca, ta, alla = _pick(store, a)
    cb, tb, allb = _pick(store, b)
    config = []
    def cmp(name, x, y):
        if x != y:
            config.append({"what": name, "a": x, "b": y})
    cmp("campaign.kind", ca.kind, cb.kind)
    cmp("campaign.experiment", ca.experiment, cb.experiment)
    for k in sorted(set(ca.params) | set(cb.params)):
        cmp(f"campaign.params.{k}", ca.params.get(k), cb.params.get(k))
    if ta and tb:
        for field in ("arm", "host", "commit", "tree_hash", "status"):
            cmp(f"trial.{field}", getattr(ta, field), getattr(tb, field))
    fa = store.fingerprint(ta.fingerprint) if ta and ta.fingerprint else None
    fb = store.fingerprint(tb.fingerprint) if tb and tb.fingerprint else None
    changes = []
    if fa is not None and fb is not None:
        changes = [{"path": c.path, "a": None if c.a is _absent() else c.a, "b": None if c.b is _absent() else c.b}
                   for c in fp_diff(fa, fb)]
    flags_a = Counter(f for t in alla for f in t.flags)
    flags_b = Counter(f for t in allb for f in t.flags)
    return {
        "a": {"ref": a, "campaign": ca.id, "trial": ta.trial if ta else None, "fingerprint": ta.fingerprint if ta else None,
              "metrics": _metric_summary(alla), "flags": dict(flags_a)},
        "b": {"ref": b, "campaign": cb.id, "trial": tb.trial if tb else None, "fingerprint": tb.fingerprint if tb else None,
              "metrics": _metric_summary(allb), "flags": dict(flags_b)},
        "config": config,
        "fingerprint": changes,
        "fingerprint_missing": [x for x, f in ((a, fa), (b, fb)) if f is None],
    }


def _absent():
    from .fingerprint import ABSENT
    return ABSENT
