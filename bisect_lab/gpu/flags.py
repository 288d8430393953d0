"""Flag trials whose GPU clocks or throttle state differ from the campaign's norm."""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Hashable, Mapping, Sequence

from .snapshot import GpuSnapshot

CLOCK_DIFFERS = "clock-differs"
THROTTLED = "throttled"


@dataclass(frozen=True)
class TrialFlags:
    """What :func:`flag_trials` found.

    ``flags[key]`` is a tuple of flag names (``clock-differs``, ``throttled``) for
    every trial key given; ``details[key]`` says why in words; ``norm`` is the
    campaign's norm per ``(host, gpu index, phase)``: median SM clock of non-idle
    readings, max SM clock, and the throttle reasons most trials share.
    """

    flags: Mapping[Hashable, tuple[str, ...]]
    details: Mapping[Hashable, tuple[str, ...]]
    norm: Mapping[tuple[str, int, Hashable], Mapping[str, object]]

    def flagged(self) -> list[Hashable]:
        return [k for k, v in self.flags.items() if v]


def _perf(g) -> frozenset[str]:
    return frozenset(g.perf_throttle)


def _phases(snaps) -> list[tuple[Hashable, GpuSnapshot]]:
    items = snaps.items() if isinstance(snaps, Mapping) else enumerate(snaps)
    return [(ph, s) for ph, s in items if s is not None]


def flag_trials(trials: Mapping[Hashable, Sequence[GpuSnapshot | None] | Mapping[str, GpuSnapshot | None]], *,
                clock_tolerance: float = 0.05) -> TrialFlags:
    """Compare each trial's GPU snapshots (e.g. before and after) with the campaign norm.

    ``trials`` maps a trial key to its snapshots, either a sequence (position is
    the phase: ``[before, after]``) or a mapping ``{"before": s, "after": s}``.
    Readings are compared like with like: per ``(host, gpu, phase)``, because a
    GPU right after a benchmark and one under load run at different clocks by
    design. Per ``(host, gpu, phase)``:

    * ``clock-differs``: an *active* reading (one whose throttle reasons do not
      include ``gpu_idle``; an idle GPU parks at ~345 MHz by design) has an SM
      clock more than ``clock_tolerance`` (relative) from the campaign's median
      active SM clock, or a max SM clock different from the campaign's usual one
      (someone locked or capped clocks).
    * ``throttled``: a reading has a performance throttle reason (power cap,
      thermal, hardware slowdown, power brake) that most trials do not have.
      When most trials are throttled the norm says so and only the odd ones out
      are flagged; ``norm`` keeps the shared reasons for the report.

    Snapshots without GPUs are ignored, so a GPU-less campaign flags nothing.
    """
    Key = tuple  # (host, gpu index, phase)
    active: dict[Key, list[float]] = defaultdict(list)
    maxclk: dict[Key, Counter] = defaultdict(Counter)
    throttles: dict[Key, Counter] = defaultdict(Counter)
    trials_per: Counter = Counter()
    for key, snaps in trials.items():
        seen_reasons: dict[Key, set[str]] = defaultdict(set)
        seen: set[Key] = set()
        for ph, s in _phases(snaps):
            for g in s.gpus:
                gk = (s.host, g.index, ph)
                seen.add(gk)
                # An idle GPU parks its clock (~345 MHz on an H200): not a condition of the run.
                if g.sm_clock_mhz is not None and not g.idle_state:
                    active[gk].append(float(g.sm_clock_mhz))
                if g.sm_clock_max_mhz is not None:
                    maxclk[gk][float(g.sm_clock_max_mhz)] += 1
                seen_reasons[gk] |= _perf(g)
        for gk in seen:
            trials_per[gk] += 1
            for r in seen_reasons[gk]:
                throttles[gk][r] += 1

    norm: dict[Key, dict[str, object]] = {}
    for gk, n in trials_per.items():
        norm[gk] = {
            "sm_clock_mhz": statistics.median(active[gk]) if active[gk] else None,
            "sm_clock_max_mhz": maxclk[gk].most_common(1)[0][0] if maxclk[gk] else None,
            "throttle": tuple(sorted(r for r, c in throttles[gk].items() if c * 2 > n)),
            "trials": n,
        }

    flags: dict[Hashable, tuple[str, ...]] = {}
    details: dict[Hashable, tuple[str, ...]] = {}
    for key, snaps in trials.items():
        f: set[str] = set()
        why: list[str] = []
        for ph, s in _phases(snaps):
            for g in s.gpus:
                nm = norm[(s.host, g.index, ph)]
                where = f"{s.host} gpu{g.index} {ph if isinstance(ph, str) else f'snapshot {ph}'}"
                ref = nm["sm_clock_mhz"]
                if (ref and g.sm_clock_mhz is not None and not g.idle_state
                        and abs(g.sm_clock_mhz - ref) > clock_tolerance * ref):
                    f.add(CLOCK_DIFFERS)
                    why.append(f"{where}: SM clock {g.sm_clock_mhz:.0f} MHz vs norm {ref:.0f} MHz")
                if (nm["sm_clock_max_mhz"] is not None and g.sm_clock_max_mhz is not None
                        and g.sm_clock_max_mhz != nm["sm_clock_max_mhz"]):
                    f.add(CLOCK_DIFFERS)
                    why.append(f"{where}: max SM clock {g.sm_clock_max_mhz:.0f} MHz "
                               f"vs norm {nm['sm_clock_max_mhz']:.0f} MHz")
                extra = _perf(g) - set(nm["throttle"])
                if extra:
                    f.add(THROTTLED)
                    why.append(f"{where}: throttled ({', '.join(sorted(extra))}) "
                               f"at SM {g.sm_clock_mhz if g.sm_clock_mhz is not None else '?'} MHz, "
                               f"{g.temperature_c if g.temperature_c is not None else '?'} C")
        flags[key] = tuple(sorted(f))
        details[key] = tuple(dict.fromkeys(why))
    return TrialFlags(flags, details, norm)
