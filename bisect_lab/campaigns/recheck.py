"""``recheck``: was an old reading real? The same arm measured again now (layer 5).

The old reading's arm, base commit, patches and environment are measured again in new sessions
(new launches, as a new campaign of kind ``recheck``); the old value is then placed in today's
launch-to-launch distribution (``stats.recheck``), next to what differs between then and now in
the fingerprints (driver, clocks, NCCL, packages, env, load).
"""
from __future__ import annotations

import math

from ..arms import parse_arm
from ..errors import UsageError
from ..model import TrialResult
from ..results import RecheckResult
from .run import measure_arms
from .session import Session


def _counted(trials: list[TrialResult]) -> list[TrialResult]:
    return [t for t in trials if t.ok and t.tag != "warmup"]


def old_launch(store, ref: str, metric: str) -> tuple[TrialResult, list[float]]:
    """The old launch ``ref`` (``CAMPAIGN:TRIAL``, or ``CAMPAIGN`` when it holds one launch) names:
    a trial standing for it and the launch's counted readings of ``metric``."""
    cid, _, idx = ref.partition(":")
    camp = store.campaign(cid)
    trials = store.trials(camp.id)
    counted = _counted(trials)
    if idx:
        try:
            i = int(idx)
        except ValueError:
            raise UsageError(f"bad reference {ref!r}: expected CAMPAIGN or CAMPAIGN:TRIAL with a trial number") from None
        match = [t for t in trials if t.trial == i]
        if not match:
            raise UsageError(f"campaign {camp.id} has no trial {i} (its trials are 0..{len(trials) - 1})")
        t = match[0]
        if not t.ok or t.tag == "warmup":
            raise UsageError(f"trial {camp.id}:{i} is not a counted measurement "
                             f"({'a warmup reading' if t.tag == 'warmup' else t.status.value}): name another")
    else:
        launches = {(t.session or f"trial {t.trial}") for t in counted}
        if len(launches) != 1:
            arms = sorted({t.arm for t in counted})
            example = counted[0].trial if counted else 0
            raise UsageError(f"campaign {camp.id} holds {len(launches)} launches of {len(arms)} arm(s): name the "
                             f"reading to recheck as {camp.id}:TRIAL (e.g. {camp.id}:{example}, arm {counted[0].arm!r})"
                             if counted else f"campaign {camp.id} has no successful measurement to recheck")
        t = counted[0]
    same = [x for x in counted if x.session == t.session] if t.session else [t]
    values = [float(x.metrics[metric]) for x in same if isinstance(x.metrics.get(metric), (int, float))
              and x.metrics[metric] > 0]
    if not values:
        raise UsageError(f"trial {camp.id}:{t.trial} has no positive {metric!r} to recheck")
    return t, values


def recheck(session: Session, ref: str, *, sessions: int = 5) -> RecheckResult:
    """Measure the arm of the old launch ``ref`` again in ``sessions`` new launches and say
    whether the old value lies inside today's launch-to-launch distribution."""
    from ..diffing import diff_runs
    from ..stats.recheck import check_launch
    exp, store, metric = session.experiment, session.store, session.metric
    if sessions < 2:
        raise UsageError("--sessions must be at least 2: one launch cannot show launch-to-launch variation")
    old, values = old_launch(store, ref, metric)
    arm = parse_arm(old.arm, exp.patchset)
    old_ref = f"{old.campaign}:{old.trial}"
    old_value = math.exp(sum(math.log(v) for v in values) / len(values))
    if exp.server is not None:
        session.fixed_readings = len(values)      # launches like the old one: as many readings each
    params = {"of": old_ref, "old_value": old_value, "old_readings": len(values), "old_tree_hash": old.tree_hash}
    cid, _, trials = measure_arms(session, [arm.spec], repeat=sessions, commit=old.commit, kind="recheck",
                                  params=params)
    groups: dict[str, list[float]] = {}
    for t in _counted(trials):
        v = t.metrics.get(metric)
        if isinstance(v, (int, float)) and v > 0:
            groups.setdefault(t.session or f"trial {t.trial}", []).append(float(v))
    if len(groups) < 2:
        raise UsageError(f"recheck {cid}: fewer than two launches measured today ({len(groups)}): "
                         "nothing to compare the old value with")
    chk = check_launch(old_value, len(values), list(groups.values()))
    warnings = []
    trees = {t.tree_hash for t in trials if t.tree_hash}
    if old.tree_hash and trees and trees != {old.tree_hash}:
        warnings.append(f"today's tree differs from the old one (tree {sorted(trees)[0][:12]} vs "
                        f"{old.tree_hash[:12]}): a patch file or the base commit changed since")
    first_new = next((t for t in trials if t.ok), trials[0])
    diff = diff_runs(store, old_ref, f"{cid}:{first_new.trial}")
    differences = [{"what": c["path"], "then": c["a"], "now": c["b"]} for c in diff.get("fingerprint", [])]
    differences += [{"what": c["what"], "then": c["a"], "now": c["b"]} for c in diff.get("config", [])
                    if c["what"].startswith("trial.") and c["what"] not in ("trial.host",)]
    return RecheckResult(campaign=cid, of=old_ref, experiment=exp.name, metric=metric,
                         higher_is_better=exp.benchmark.higher_is_better, arm=arm.spec, commit=old.commit,
                         old=old_value, old_readings=len(values), today=chk.today, low=chk.low, high=chk.high,
                         sd_away=chk.sd_away, p_value=chk.p, inside=chk.inside, sessions=chk.sessions,
                         readings=chk.readings, between_cv=chk.between_cv, within_cv=chk.within_cv,
                         level=chk.level, differences=differences, fingerprint_missing=diff.get("fingerprint_missing", []),
                         warnings=warnings)
