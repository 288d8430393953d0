"""The node (host) as a block: per-host level offsets learned from the readings.

Several machines of one kind rarely run at exactly the same level (a 1-3% spread between GPU nodes
is common). A search that compares each new arm with what came before would read such a spread as
an effect whenever the two arms happened to run on different hosts. The model here is additive on
the log scale: ``log y = level(arm) + offset(host) + noise``, with the first host seen as the
reference (offset 0). Offsets are identified by the arms measured on more than one host (the
strategies make every host measure both reference arms first), fitted by alternating means, and
recomputed from every reading at every decision, so a strategy stays a pure function of what it
was told. With one host (or no block given) every offset is 0 and values are untouched.
"""
from __future__ import annotations

import math
from typing import Hashable, Sequence

import numpy as np

# A host whose level differs from the reference host's by this much (and clearly, at 2 standard
# errors) is named in the verdict's warnings.
WARN_OFFSET = 0.01
_ITERATIONS = 50


def host_offsets(arms: Sequence[Hashable], blocks: Sequence[Hashable], logs: Sequence[float]
                 ) -> dict[Hashable, float]:
    """Per-block log-level offsets (the first block seen is 0) of readings ``logs`` of ``arms``
    taken on ``blocks``: the least-squares fit of the additive arm + block model."""
    order = list(dict.fromkeys(blocks))
    if len(order) <= 1:
        return {b: 0.0 for b in order}
    y = np.asarray(logs, dtype=float)
    ai = np.array(_codes(arms))
    bi = np.array([order.index(b) for b in blocks])
    na, nb = ai.max() + 1, len(order)
    off = np.zeros(nb)
    na_count = np.bincount(ai, minlength=na)
    nb_count = np.bincount(bi, minlength=nb)
    for _ in range(_ITERATIONS):
        lvl = np.bincount(ai, y - off[bi], minlength=na) / np.maximum(na_count, 1)
        new = np.bincount(bi, y - lvl[ai], minlength=nb) / np.maximum(nb_count, 1)
        new -= new[0]
        if np.max(np.abs(new - off)) < 1e-10:
            off = new
            break
        off = new
    # a block that shares no arm with the others has no identified offset: leave it at 0
    shared = _connected(ai, bi, nb)
    return {b: (float(off[k]) if shared[k] else 0.0) for k, b in enumerate(order)}


def offset_errors(arms: Sequence[Hashable], blocks: Sequence[Hashable], logs: Sequence[float],
                  offsets: dict[Hashable, float]) -> dict[Hashable, float]:
    """Rough standard error of each block's offset: the residual sd over the square root of the
    readings of arms that block shares with the reference block (both sides counted)."""
    order = list(dict.fromkeys(blocks))
    if len(order) <= 1:
        return {b: 0.0 for b in order}
    y = np.asarray(logs, dtype=float) - np.array([offsets.get(b, 0.0) for b in blocks])
    codes = _codes(arms)
    means: dict = {}
    for c, v in zip(codes, y):
        means.setdefault(c, []).append(v)
    resid = [v - np.mean(means[c]) for c, v in zip(codes, y) if len(means[c]) > 1]
    dof = max(1, len(resid) - sum(1 for v in means.values() if len(v) > 1))
    sd = math.sqrt(sum(r * r for r in resid) / dof) if resid else math.inf
    ref = order[0]
    ref_arms = {c for c, b in zip(codes, blocks) if b == ref}
    out = {}
    for b in order:
        if b == ref:
            out[b] = 0.0
            continue
        mine = [c for c, bb in zip(codes, blocks) if bb == b and c in ref_arms]
        theirs = [c for c, bb in zip(codes, blocks) if bb == ref and c in set(mine)]
        out[b] = sd * math.sqrt(1 / len(mine) + 1 / len(theirs)) if mine and theirs else math.inf
    return out


def deblocked(arms: Sequence[Hashable], blocks: Sequence[Hashable], values: Sequence[float | None]
              ) -> list[float | None]:
    """``values`` with each reading's host offset taken out (ratio scale; None stays None)."""
    ok = [k for k, v in enumerate(values) if v is not None]
    if len(set(blocks[k] for k in ok)) <= 1:
        return list(values)
    off = host_offsets([arms[k] for k in ok], [blocks[k] for k in ok], [math.log(values[k]) for k in ok])
    return [None if v is None else (v if off.get(b, 0.0) == 0.0 else v / math.exp(off[b]))
            for v, b in zip(values, blocks)]


def level_warnings(arms: Sequence[Hashable], blocks: Sequence[Hashable], values: Sequence[float | None]
                   ) -> list[str]:
    """One line per host whose level clearly differs from the first host's (read as a host level,
    taken out of every comparison, never as an effect)."""
    ok = [k for k, v in enumerate(values) if v is not None]
    bl = [blocks[k] for k in ok]
    if len(set(bl)) <= 1:
        return []
    ar, lg = [arms[k] for k in ok], [math.log(values[k]) for k in ok]
    off = host_offsets(ar, bl, lg)
    se = offset_errors(ar, bl, lg, off)
    ref = bl[0]
    out = []
    for b, o in off.items():
        if b == ref or abs(o) < math.log1p(WARN_OFFSET) or not abs(o) > 2 * se.get(b, math.inf):
            continue
        out.append(f"host {_name(b)} measures {math.expm1(o):+.1%} against host {_name(ref)} on the same arms: "
                   "read as a host level (taken out of every comparison), not as an effect")
    return out


def _name(block) -> str:
    return "local" if block is None else str(block)     # no block given: the one local host


def linked_blocks(arms: Sequence[Hashable], blocks: Sequence[Hashable]) -> set:
    """The blocks linked to the first one seen through arms both measured (directly or via others):
    those whose offset the shared arms identify."""
    order = list(dict.fromkeys(blocks))
    if not order:
        return set()
    linked = _connected(np.array(_codes(arms)), np.array([order.index(b) for b in blocks]), len(order))
    return {b for b, ok in zip(order, linked) if ok}


def _codes(arms: Sequence[Hashable]) -> list:
    seen: dict = {}
    return [seen.setdefault(a, len(seen)) for a in arms]


def _connected(ai: np.ndarray, bi: np.ndarray, nb: int) -> list[bool]:
    """Which blocks are linked to block 0 through shared arms."""
    arms_of = [set(ai[bi == b].tolist()) for b in range(nb)]
    linked = {0}
    frontier = [0]
    while frontier:
        b = frontier.pop()
        for o in range(nb):
            if o not in linked and arms_of[o] & arms_of[b]:
                linked.add(o)
                frontier.append(o)
    return [b in linked for b in range(nb)]
