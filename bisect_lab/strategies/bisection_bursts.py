"""The noisy bisection's guard against bursts of host contention: the reference tells a burst from
a level.

A burst (another job on the box, a page-cache storm) makes every reading slow for a few minutes,
whatever its commit. The posterior's stall model treats readings as independent, so six slow
readings in a row sent splits the wrong way and the search spent its budget recovering (issue #23:
a 5% step with bursts was right in 67-75% of runs). The guard: a reading slower than both fitted
levels by ``BURST_K`` noise sd is held out of the fit, and the known-good endpoint (the reference)
is read next. If it reads at its level, the slow reading was a lone stall: it goes back in (the
stall model discounts it as before) and the search goes on. If the reference is slow too, the host
is slow, not the commit: the held reading and every slow reference reading are left out, and the
reference is read again until it is back at its level. A reference that stays slow for
``BURST_MAX_REFS`` readings is a machine that changed, not a burst: the readings go back in as a
block of their own (``MachineFrom``: the host from that trial on is another host, whose level the
reference and the other positions read on both sides identify, as with several hosts), the guard
stops, and the verdict says so.

A mixin of ``bisection.BisectionStrategy`` (one host only: with several, a burst is one host's and
the host levels are fitted instead). Pure and seeded like the rest: replaying the same tells gives
the same decisions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# A reading this many noise sd below both fitted levels is suspect. Bursts of 20-35% at CV 3% sit
# 7-12 sd below their commit's level; the body of the H200 eager noise shape (skewed) reaches past
# 5 sd below in about 1 reading of 1000 (each costs one reference reading).
BURST_K = 5.0
# The reference counts as slow below its own level by this many sd: tighter than BURST_K, since its
# level is known and a burst shifts it by 7 sd or more.
REF_K = 4.0
# Never a smaller gap than this (log units, ~10%), below both levels or below the reference's: a
# burst is a large shift, and the noise is barely known early on (the confirm step's handful of
# readings put the fitted sd at 0.5% for a CV of 3%, and ordinary reference readings then read as
# "slow": a null run with stalls held 20 in a row).
MIN_GAP = 0.105
# A reference slow this many times in a row is a changed machine, not a burst.
BURST_MAX_REFS = 20
# A machine that changes by less than a burst's gap (issue #23: a 5% step with the host 8% slower
# from trial 20 was answered `no-regression` in 16 of 40 runs): the endpoints, re-read every
# REMEASURE_EVERY trials, shift together. A slowdown of the endpoints' latest readings against
# their earlier medians (MACHINE_MIN_BEFORE of them at least) of min_effect or more, at MACHINE_Z
# standard errors or more of the noise before it, with all but a fifth of the later readings
# carrying at least half of it (a stall must not), on MACHINE_MIN_AFTER readings or more, is a
# changed machine. So is a speed-up of a burst's size (MIN_GAP) read the same way on both endpoints:
# the earlier readings sat in a burst that nothing before them could show (the confirm step's).
MACHINE_Z = 3.5
MACHINE_MIN_AFTER = 2
MACHINE_MIN_BEFORE = 3
# ... and before a `no-regression` answer, which contradicts the confirm step, both endpoints are
# read MACHINE_MIN_AFTER times after it, and after any later reading of one endpoint that sits this
# far below its earlier ones (a hint of a slower machine), so that the watch can see a change.
MACHINE_DOUBT_Z = 1.5


@dataclass(frozen=True)
class MachineFrom:
    """The block of the readings from ``trial`` (1-based) on, after the machine changed."""

    host: object
    trial: int

    def __str__(self) -> str:
        return f"{self.host or 'local'} from trial {self.trial}"


class BurstWatch:
    """Reads and sets ``BisectionStrategy`` state; ``burst_guard = False`` is the strategy as it was
    before the guard (the benchmark's side by side)."""

    burst_guard = True

    def _burst_init(self) -> None:
        self._burst: dict | None = None      # open: {"held": [reading, ...], "refs": slow reference reads}
        # closed: {"trials": [path index, ...], "refs": n, "kept": False}; "kept": True is the one
        # that was a changed machine (its readings went back in and the guard stopped)
        self._bursts: list[dict] = []
        self._burst_off = False
        self._lone: set[int] = set()          # trials of held readings the reference cleared (lone stalls)
        self._machine: MachineFrom | None = None   # the block of every reading once the machine changed

    def _burst_active(self) -> bool:
        return self._burst is not None

    def _burst_held(self) -> list[int]:
        """Path indices of every reading the guard left out (closed bursts and an open one)."""
        out = [i for b in self._bursts if not b["kept"] for i in b["trials"]]
        if self._burst is not None:
            out += [r[5] for r in self._burst["held"]]
        return sorted(out)

    def _burst_tell(self) -> bool:
        """Judge the reading just appended to the observation lists. True: it is held out (the fit
        is not updated); False: it stays (held readings may have gone back in before it)."""
        if not self.burst_guard or self._burst_off or self.parallel > 1 \
                or self._phase not in ("confirm", "bisect", "models"):
            return False
        levels = self._burst_levels()
        if levels is None:
            return False
        x, a, b, ref_gap, any_gap = levels
        pos = self._obs_pos[-1]
        if self._burst is None:
            if x < min(a, b) - any_gap:
                self._burst = {"held": [self._pop_reading()], "refs": 0}
                return True
            return False
        slow = x < a - ref_gap if pos == 0 else x < min(a, b) - any_gap
        if slow:
            self._burst["held"].append(self._pop_reading())
            self._burst["refs"] += pos == 0
            if self._burst["refs"] < BURST_MAX_REFS:
                return True
            self._bursts.append(self._closed(kept=True))
            self._burst_off = True
            held = self._burst["held"]         # the latest reading is among them
            self._machine = MachineFrom(held[0][3], held[0][5] + 1)
            self._burst["held"] = [r[:3] + (self._machine,) + r[4:] for r in held]
            self._restore_held(latest=False)
            self._deblock()
            return False
        if self._burst["refs"] == 0:
            # a lone stall: the stall model's business, as before, but its fit starts from knowing
            # it (two such stalls among the confirm step's endpoint readings had hidden each other)
            self._lone.update(r[4] for r in self._burst["held"])
            self._restore_held()
        else:
            self._bursts.append(self._closed(kept=False))
        self._burst = None
        return False

    def _burst_levels(self) -> tuple[float, float, float, float, float] | None:
        """(the latest reading, good level, bad level, how far below the good level a reference
        reading is slow, how far below both levels any reading is), on the fit's scale; None while
        there is nothing to judge by. Bisecting: the fit's levels and sd (in its drift and centring
        frame). Confirming: the endpoints' medians of the readings before, and a robust pooled sd.
        Either gap at least MIN_GAP."""
        if self._phase != "confirm":
            if self._params is None:
                return None
            a, b, sg, sb, beta = self._params
            _, t_mean, centre = self._frame
            x = self._obs_u[-1] - beta * (self._obs_t[-1] - t_mean) - centre
            return x, a, b, max(REF_K * sg, MIN_GAP), max(BURST_K * max(sg, sb), MIN_GAP)
        pos = np.asarray(self._obs_pos[:-1], dtype=np.int64)
        u = np.asarray(self._obs_u[:-1], dtype=float)
        g, d = u[pos == 0], u[pos == self.n - 1]
        if not g.size or not d.size:
            return None
        a, b = float(np.median(g)), float(np.median(d))
        r = np.concatenate([g - a, d - b])
        sd = 1.4826 * float(np.median(np.abs(r))) if r.size >= 6 else 0.0
        return self._obs_u[-1], a, b, max(REF_K * sd, MIN_GAP), max(BURST_K * sd, MIN_GAP)

    def _closed(self, *, kept: bool) -> dict:
        return {"trials": [r[5] for r in self._burst["held"]], "refs": int(self._burst["refs"]), "kept": kept}

    def _lone_weights(self, omega: np.ndarray, t: np.ndarray, outlier: float) -> np.ndarray:
        """``omega`` with the lone stalls the guard found starting as outliers (weight ``outlier``)."""
        if self._lone:
            m = np.isin(t.astype(np.int64), list(self._lone))
            omega = np.where(m, np.minimum(omega, outlier), omega)
        return omega

    def _machine_watch(self) -> None:
        """After an endpoint reading: do the endpoints' latest readings show a machine that changed
        (see MACHINE_Z)? If so the readings from the change on become a block of their own (as
        after a reference that stayed slow; the caller's refit then reads them) and the change is
        recorded. The change's trial is the one, between the last endpoint reading before the
        shift and the first after it, where the block split fits the readings best."""
        if self._burst is not None or self._params is None or self._phase not in ("bisect", "models"):
            return
        best = None
        for s, groups, shift in self._endpoint_shifts(MACHINE_MIN_AFTER):
            # Slower (u is oriented: lower is worse): contention and throttling slow a host. A
            # "faster" shift of a few percent was what a stall among the earlier readings left (4
            # of 120 stall runs); one of a burst's size, on both endpoints, is a burst that the
            # earlier readings sat in (the confirm step read in it: nothing before to tell it by).
            slower = shift[1] <= -MACHINE_Z and shift[0] <= -self._d_min
            faster = shift[1] >= MACHINE_Z and shift[0] >= MIN_GAP and all(later.size for _, later in groups)
            if not (slower or faster):
                continue
            if best is None or abs(shift[1]) > abs(best[2]):
                best = (s, shift[0], shift[1])
        if best is None:
            return
        s = best[0]
        pos, t = np.asarray(self._obs_pos, dtype=np.int64), np.asarray(self._obs_t, dtype=np.int64)
        ends = np.flatnonzero((pos == 0) | (pos == self.n - 1))
        lo = int(t[ends][t[ends] < s].max()) + 1
        change = min(range(lo, s + 1), key=lambda c: self._split_rss(c))
        self._machine = MachineFrom(self._obs_blk[-1], change)
        self._obs_blk[:] = [self._machine if tk >= change else b for tk, b in zip(self._obs_t, self._obs_blk)]
        self._deblock()
        after = [int(self._obs_pathi[k]) for k in ends if t[k] >= s]
        self._bursts.append({"trials": [change - 1] + sorted(after), "refs": 0, "kept": True,
                             "shift": float(np.exp(self._sign * best[1]))})

    def _machine_doubt(self) -> int | None:
        """Before a `no-regression` answer: the endpoint to read first, while either endpoint has
        fewer than MACHINE_MIN_AFTER readings since the confirm step, or since a reading of one of
        them that hints at a slower machine (MACHINE_DOUBT_Z, one reading enough). The confirm step
        found a regression; a machine that slowed after it makes every later reading read low, and
        "no regression" fitted with one endpoint read once or never since (benchmark cell 21: a 5%
        step, the host 8% slower from trial 20, answered `no-regression` in 15-19 of 200 runs).
        The watch then sees the shift in both. None: no such endpoint (or the watch is off)."""
        if self._phase != "bisect" or not self._watching():
            return None
        pos = np.asarray(self._obs_pos[self._confirm_obs:], dtype=np.int64)
        fewest = min((int(np.sum(pos == e)), e) for e in (0, self.n - 1))
        if fewest[0] < MACHINE_MIN_AFTER:
            return fewest[1]
        for _, groups, shift in self._endpoint_shifts(1):
            if shift[1] > -MACHINE_DOUBT_Z or shift[0] > -self._d_min:
                continue
            short = [(a.size, e) for e, (_, a) in zip((0, self.n - 1), groups) if a.size < MACHINE_MIN_AFTER]
            if short:
                return min(short)[1]
        return None

    def _watching(self) -> bool:
        """The machine watch is on: no change found yet, the guard on, one host."""
        return self._machine is None and self.burst_guard and not self._burst_off and self.parallel == 1

    def _endpoint_shifts(self, min_after: int):
        """(split trial, the endpoints' (earlier, later) readings, (shift, z)) for each endpoint
        reading after the confirm step as the first of the later ones, where ``_common_shift``
        has one; nothing once a machine change is known, or off (the guard off, several hosts).
        Only readings after the confirm step can show the change: its quick alternation of the
        endpoints is the "before" that every later re-reading is compared with."""
        if not self._watching():
            return
        pos = np.asarray(self._obs_pos, dtype=np.int64)
        u = np.asarray(self._obs_u, dtype=float)
        t = np.asarray(self._obs_t, dtype=np.int64)
        ends = [np.flatnonzero(pos == e) for e in (0, self.n - 1)]
        first = self._obs_t[self._confirm_obs] if self._confirm_obs < len(self._obs_t) else t.max() + 1
        for s in np.unique(t[np.concatenate(ends)]):
            if s < first:
                continue
            groups = [(u[k][t[k] < s], u[k][t[k] >= s]) for k in ends]
            shift = _common_shift(groups, _within_sd(pos[t < s], u[t < s]), min_after=min_after)
            if shift is not None:
                yield int(s), groups, shift

    def _split_rss(self, change: int) -> float:
        """Residual sum of squares of the host-offset fit with a new block from trial ``change``."""
        from .blocks import host_offsets
        arms = self._block_arms()
        blk = ["new" if tk >= change else "old" for tk in self._obs_t]
        off = host_offsets(arms, blk, self._obs_log)
        y = np.asarray(self._obs_log) - np.array([off.get(b, 0.0) for b in blk])
        codes: dict = {}
        idx = np.array([codes.setdefault(a, len(codes)) for a in arms])
        means = np.bincount(idx, y) / np.bincount(idx)
        return float(((y - means[idx]) ** 2).sum())

    def _block_of(self, block):
        """The block a new reading belongs to: the changed machine's once there is one."""
        return block if self._machine is None else self._machine

    def _ask_reference(self) -> list[int]:
        return [] if 0 in self._outstanding else [0]

    def _pop_reading(self) -> tuple:
        return (self._obs_pos.pop(), self._obs_u.pop(), self._obs_log.pop(), self._obs_blk.pop(),
                self._obs_t.pop(), self._obs_pathi.pop())

    def _restore_held(self, latest: bool = True) -> None:
        """Put the held readings back, in trial order: before the latest one (``latest``: it is
        still in the lists, after them)."""
        last = [self._pop_reading()] if latest else []
        for r in self._burst["held"] + last:
            for lst, v in zip((self._obs_pos, self._obs_u, self._obs_log, self._obs_blk, self._obs_t,
                               self._obs_pathi), r):
                lst.append(v)
        self._burst = None


def _common_shift(groups: list[tuple[np.ndarray, np.ndarray]], sd: float,
                  min_after: int = MACHINE_MIN_AFTER) -> tuple[float, float] | None:
    """(shift, z) of the later readings against the earlier ones, common to every group (the
    endpoints), weighted as a two-sample difference at noise ``sd``; None unless there are
    ``min_after`` later readings of groups with MACHINE_MIN_BEFORE earlier ones, and all but a
    fifth of them (rounded down) carry at least half of the shift, on its side."""
    used = [(b, a) for b, a in groups if b.size >= MACHINE_MIN_BEFORE and a.size]
    if sum(a.size for _, a in used) < min_after:
        return None
    w = np.array([1.0 / (1.0 / b.size + 1.0 / a.size) for b, a in used])
    # the earlier readings' median: one stall among them must not make every later one look fast
    d = np.array([a.mean() - np.median(b) for b, a in used])
    shift = float((w * d).sum() / w.sum())
    sd = max(sd, 1e-6)
    later = np.concatenate([a - np.median(b) for b, a in used])
    # A fifth of them may fall short (rounded down: all of up to four): a real shift of 8% at CV 3%
    # leaves one reading in ten short of half of it, and the watch had asked every one, so the more
    # readings after the change, the less it could see it (z of -5 on 23 readings, 18 carrying it).
    if int(np.sum(later * np.sign(shift) < abs(shift) / 2)) > later.size // 5:
        return None
    return shift, shift / (sd / math.sqrt(float(w.sum())))


def _within_sd(pos: np.ndarray, u: np.ndarray) -> float:
    """The plain pooled spread of readings about their position's mean (positions read twice or
    more): the noise before a candidate change, which the change itself cannot inflate (the fit's
    sd took in the shifted readings and read 5.5% for a CV of 3%). Infinite (no shift passes)
    with under 4 degrees of freedom."""
    xs, inv = np.unique(pos, return_inverse=True)
    cnt = np.bincount(inv)
    df = int(u.size - xs.size)
    if df < 4:
        return math.inf
    mean = np.bincount(inv, u) / cnt
    return math.sqrt(float(((u - mean[inv]) ** 2).sum()) / df)
