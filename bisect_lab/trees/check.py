"""``bisect-lab patches check``: does a patch set apply, alone, together and in overlapping pairs?
Temporary indexes only: no worktree is created."""
from __future__ import annotations

from ..errors import PatchError
from ..hosts.base import Host
from ..model import PatchSet, Target
from ..patchset import closure
from .manager import TreeManager
from .records import CheckFailure, CheckReport


def check_patchset(host: Host, target: Target, patchset: PatchSet, *, ref: str | None = None,
                   manager: TreeManager | None = None) -> CheckReport:
    """Check a patch set against the target's base ref without creating any worktree.

    1. each patch applies to the base with what it requires (dependency order);
    2. the full set applies;
    3. every pair of patches that touch a common file applies together (patches touching disjoint
       files cannot conflict, so other pairs are skipped); a failing pair is listed as a conflict
       naming both patches, the one that failed and the file.
    Pairs involving a patch that fails alone are not checked (already reported).
    """
    tm = manager or TreeManager(host, target, patchset)
    ref = ref or target.ref or "HEAD"
    base = tm.resolve(ref)
    names = patchset.names
    alone: list[CheckFailure] = []
    bad: set[str] = set()

    def attempt(selection, kind, label) -> CheckFailure | None:
        try:
            tm.apply_check(selection, base)
            return None
        except PatchError as e:
            reason = getattr(e, "reason", None) or str(e).split(": ", 1)[-1]
            hunk = getattr(e, "hunk", None)
            msg = f"{hunk}: {reason}" if hunk else reason
            return CheckFailure(kind=kind, patches=tuple(label), patch=e.patch or "?", file=e.file, message=msg)

    for n in names:
        f = attempt([n], "alone", [n])
        if f:
            alone.append(f)
            bad.add(n)
    full = attempt(list(names), "full-set", names) if names else None
    conflicts: list[CheckFailure] = []
    pairs = 0
    good = [n for n in names if n not in bad and not (closure(patchset, [n]) & bad)]
    files = {n: {f for m in closure(patchset, [n]) for f in patchset.get(m).files} for n in good}
    for i, a in enumerate(good):
        for b in good[i + 1:]:
            if b in closure(patchset, [a]) or a in closure(patchset, [b]):
                continue       # already applied together by the "alone" check
            if not files[a] & files[b]:
                continue
            pairs += 1
            f = attempt([a, b], "pair", [a, b])
            if f:
                conflicts.append(f)
    return CheckReport(ref=ref, base=base, patches=tuple(names), alone=tuple(alone), full_set=full,
                       conflicts=tuple(conflicts), pairs_checked=pairs)
