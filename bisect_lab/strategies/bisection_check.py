"""The model check of the noisy bisection: do the readings fit one step, or a slide (``gradual``)
or two steps (``several``, each pinned by a sub-bisection) better? The fits themselves are in
``bisection_models.py``, the flank test that decides at the answer in ``bisection_flanks.py``.

A mixin of ``bisection.BisectionStrategy``: it reads and sets that class's state.
"""
from __future__ import annotations

import math

import numpy as np

from . import bisection_models as _models
from .bisection_confirm import MIN_ENDPOINT

# At the answer, the flank test (bisection_flanks.py) decides whether the step about to be named
# is the whole change (issue #23: the bootstrap below, run on the readings at hand, found a second
# step in 15% of two-step runs, 3% then 4% at CV 3%). At the looks taken every CHECK_EVERY trials
# from CHECK_FROM on, the one-step model is rejected against a slide or two steps at a bootstrap
# p below CHECK_ALPHA_LOOK (residual bootstrap of the one-step fit on the readings taken after the
# confirm step; bisection_models.py), and the flank test then confirms before the search stops: a
# slide that never concentrates has no answer to wait for.
# Strict, because the readings are not a fixed design: the confirm step stops when the endpoints
# look most apart (those readings are left out of the check: optional stopping biases them), and
# the search re-reads a position while it looks ambiguous, which makes a wrong turn look like a
# level of its own; at 1% a clean 5% step was called "several" in 8% of simulated runs.
CHECK_ALPHA_LOOK = 0.002
# A fitted second step counts only at min_effect or more and |t| >= SECOND_T.
SECOND_T = 2.0
# To reject one step for two, the weaker step must also stand alone at |t| >= REJECT_T: the bootstrap
# alone let a 25% step with skewed noise be called "several" in 2% of simulated runs.
REJECT_T = 3.5
CHECK_EVERY = 12
CHECK_FROM = 36
CHECK_REPS = 999
# Readings spent telling a slide from two steps (the flank test's own are counted apart).
MODEL_EXTRA = 16
# Several hosts: model-check probes per batch (each one a round of its own would cost wall time).
PROBE_BATCH = 2
# Slide against two steps: two steps win when N log(RSS_slide / RSS_two) exceeds log N (one more
# parameter, BIC); within MODEL_MARGIN of that line the models are told apart by more readings.
MODEL_MARGIN = 3.0


def _two_over_slide(f) -> float:
    """How much better two steps fit than a slide: N log(RSS_slide / RSS_two), less log N for the
    one parameter more (BIC); above 0 two steps win."""
    return f.n * math.log(f.rss_slide / f.rss_two) - math.log(f.n)


class ModelCheck:
    """One step against a slide or two steps; the answers ``gradual`` and ``several``."""

    def _kept(self) -> np.ndarray:
        """Readings the noise model does not discount as stalls / gross outliers."""
        n_obs = len(self._obs_u)
        keep = np.ones(n_obs, dtype=bool)
        if self._omega is not None:
            m = min(n_obs, self._omega.size)
            keep[:m] = self._omega[:m] >= 0.5
        return keep

    def _fit_data(self, *, after_confirm: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(positions, drift-corrected u) of the kept readings, by default only those after the
        confirm step (the flank test takes the confirm step's too)."""
        pos, u, t = self._arrays()
        beta = self._params[4] if self._params is not None else 0.0
        u = u - beta * (t - t.mean())
        keep = self._kept()
        if after_confirm:
            keep[: self._confirm_obs] = False
        return pos[keep], u[keep]

    def _alternative_is_real(self, f, alt: str, t_min: float = 0.0) -> bool:
        """A second step must be of min_effect or more, a slide must have readings inside it
        (two distinct positions): otherwise the 'alternative' is noise dressed as structure."""
        if alt == "two":
            l1, l2, l3 = f.two_levels
            n1, n2, n3 = f.two_counts
            sd = math.sqrt(f.rss_two / max(f.n - 3, 1))
            t = min(abs(l1 - l2) / (sd * math.sqrt(1 / n1 + 1 / n2)), abs(l2 - l3) / (sd * math.sqrt(1 / n2 + 1 / n3)))
            return min(abs(l1 - l2), abs(l2 - l3)) >= self._d_min and t >= max(SECOND_T, t_min)
        lo, hi = f.xs[f.slide[0]], f.xs[f.slide[1]]
        return int(np.sum((f.xs > lo) & (f.xs < hi))) >= 2

    def _model_check(self, *, final: bool) -> str:
        """Do the readings fit one step? 'one' (yes, or cannot tell), 'probe' (undecided:
        ``_probe`` is measured next), or 'rejected' (phase 'models' or finished).

        At the answer (``final``) the flank test (``bisection_flanks``) decides: is the step about
        to be named the whole change? At the looks every CHECK_EVERY trials, the bootstrap test
        on the search's own readings first (a slide that never concentrates has no answer to
        wait for); when it rejects one step, the flank test, from then on at every reading
        until it decides, says whether to stop the search for a slide or two steps."""
        self._last_check_t = len(self._path)
        if final:
            self._flank_look = False
        elif not self._flank_look:
            pos, u = self._fit_data()
            f, p = _models.check_one_step(pos, u, seed=[self.seed, len(self._path)], reps=CHECK_REPS)
            self._check = {"p_one_step": p, "model": "one", "extra": self._extra}
            if f is None:
                return "one"
            alt = "slide" if f.rss_slide <= f.rss_two else "two"
            if not (p <= CHECK_ALPHA_LOOK and self._alternative_is_real(f, alt, t_min=REJECT_T)):
                return "one"
            self._flank_look = True
        verdict = self._flank_check()
        if final and verdict != "probe":
            # For the record (``check``): the bootstrap p of one step on the search's readings.
            pos, u = self._fit_data()
            _, p = _models.check_one_step(pos, u, seed=[self.seed, len(self._path)], reps=CHECK_REPS)
            self._check = dict(self._check or {}, p_one_step=p)
        if verdict == "one":
            self._flank_look = False
        if verdict != "rejected":
            return verdict
        # A second step on one flank: a slide or two steps (by BIC, as above); two steps are
        # pinned where the flank test found them.
        self._flank_look = False
        self._phase = "models"
        pos, u = self._fit_data()
        fa = self._flank_fit(pos, u)
        if fa is None:
            self._check = dict(self._check or {}, model="two", extra=self._extra)
            self._start_steps(None)
        else:
            self._decide_models(fa, pos, u)
        return "rejected"

    def _flank_fit(self, pos: np.ndarray, u: np.ndarray):
        """The model fits that keep a change at the flank test's step (None: too few positions)."""
        xs = np.unique(pos)
        a = int(np.searchsorted(xs, self._flank["c"])) - 1
        if xs.size < 4 or not 0 <= a <= xs.size - 2:
            return None
        return _models.fit_models(pos, u, anchor=a)

    def _can_probe(self, room: int) -> bool:
        """May ``room`` more probe readings be taken (the budget and the campaign's allow it)?"""
        return not self._no_more and room > 0 and len(self._path) < self.max_trials - 1

    @property
    def _models_spent(self) -> int:
        """Readings spent telling the models apart (the flank test's are counted apart)."""
        return self._extra - self._flank_extra

    def _update_models(self) -> None:
        pos, u = self._fit_data()
        f = _models.fit_models(pos, u) if self._flank is None else self._flank_fit(pos, u)
        if f is not None:
            self._decide_models(f, pos, u)

    def _decide_models(self, f, pos: np.ndarray, u: np.ndarray) -> None:
        """Slide or two steps: by BIC, with more readings where they differ while that is close."""
        self._fits = f
        d = _two_over_slide(f)
        if abs(d) < MODEL_MARGIN and self._set_probes(f, "slide", "two", pos):
            return
        self._check = dict(self._check or {}, model="two" if d > 0 else "slide", extra=self._extra)
        if d > 0:
            self._start_steps(f)
        else:
            self._finish_gradual(f)

    def _set_probes(self, f, m1: str, m2: str, pos: np.ndarray, *, refit: bool = False) -> bool:
        """Set the next probe(s) where models m1 and m2 differ most; False when there is none.
        With several hosts up to PROBE_BATCH go in one batch (one round instead of several; each
        pick counts as read once more, so a second one may be elsewhere or a repeat). ``refit``:
        for the refit before `several`, which has MODEL_EXTRA readings of its own."""
        room = MODEL_EXTRA - (self._refit_extra if refit else self._models_spent)
        if not self._can_probe(room):
            return False
        k = min(PROBE_BATCH if self.parallel > 1 else 1, room, self.max_trials - 1 - len(self._path))
        probes = self._disagreement(f, m1, m2, pos, k=max(k, 1))
        if not probes:
            return False
        self._probe, self._probe_more = probes[0], probes[1:]
        self._extra += len(probes)
        if refit:
            self._refit_extra += len(probes)
        return True

    def _disagreement(self, f, m1: str, m2: str, pos: np.ndarray, k: int = 1) -> list[int]:
        """The ``k`` testable positions where models m1 and m2 predict most differently, relative
        to how often each was read (a pick counts as one more reading); [] when they nowhere
        differ by half a noise sd."""
        xs = f.xs
        cand = set(int(x) for x in xs)
        cand |= {int((a + b) // 2) for a, b in zip(xs[:-1], xs[1:]) if b - a > 1}
        # Endpoints included: a second step far from the first shows as an endpoint that does not
        # read like the flat run next to the step.
        cand = sorted(c for c in cand if 0 <= c <= self.n - 1 and c not in self._untestable)
        if not cand:
            return None
        c = np.asarray(cand)
        diff = _models.predict(f, m1, c) - _models.predict(f, m2, c)
        sd2 = max(f.rss_one / max(f.n - 2, 1), 1e-12)
        counts = np.array([np.sum(pos == x) for x in cand], dtype=float)
        out: list[int] = []
        for _ in range(k):
            score = np.where(np.isnan(diff), -1.0, np.nan_to_num(diff) ** 2 / sd2 / (1 + counts))
            best = int(np.argmax(score))
            if score[best] < 0.25:
                break
            out.append(int(c[best]))
            counts[best] += 1
        return out

    def _finish_gradual(self, f) -> None:
        lo, hi = int(f.xs[f.slide[0]]), int(f.xs[f.slide[1]])
        pos, u, _ = self._arrays()
        keep = self._kept()
        effect, ci = self._effect_of(u[keep & (pos <= lo)], u[keep & (pos >= hi)])
        self._answer = {"range": (lo + 1, hi), "effect": effect, "ci": ci}
        self._finish("gradual", reason="model-check")

    def _start_steps(self, f) -> None:
        fl = self._flank
        if fl is not None:
            # The step found (between ``near`` and ``c``) and the flank test's second one.
            c, near, lo, hi = fl["c"], fl["near"], fl["lo"], fl["hi"]
            # Both are pinned by a sub-bisection told every reading in its stretch: the flank's (a
            # split between two neighbours read once each is no evidence of where a step is) and
            # the one the search found too (with the other step in its stretch no longer, the
            # readings may show it was none: the search's culprit was a fluke of the readings
            # between the two).
            found = {"lo": near, "hi": c, "sure": False}
            if fl["side"] == "good":
                self._steps_todo = [
                    {"lo": lo, "hi": hi, "seg_lo": 0, "seg_hi": near, "sure": False},
                    dict(found, seg_lo=hi, seg_hi=self.n - 1),
                ]
            else:
                self._steps_todo = [
                    dict(found, seg_lo=0, seg_hi=lo),
                    {"lo": lo, "hi": hi, "seg_lo": c, "seg_hi": self.n - 1, "sure": False},
                ]
        else:
            xs, (k, l) = f.xs, f.two
            self._steps_todo = [
                {"lo": int(xs[k]), "hi": int(xs[k + 1]), "seg_lo": 0, "seg_hi": int(xs[l])},
                {"lo": int(xs[l]), "hi": int(xs[l + 1]), "seg_lo": int(xs[k + 1]), "seg_hi": self.n - 1},
            ]
        self._phase = "steps"
        self._next_child()

    def _next_child(self) -> None:
        """Pin the next step by a sub-bisection of the stretch between the other step's fitted
        gap and the far end (not only the gap this step was fitted in: a fitted split is noisy,
        and a sub-bisection of a gap without the step names noise), told every reading there."""
        while self._steps_todo:
            st = self._steps_todo[0]
            lo, hi = st["lo"], st["hi"]
            if self._steps_done:
                # A later step's stretch starts where the one before it was pinned (else its
                # sub-bisection can find that one again).
                st["seg_lo"] = min(max(st["seg_lo"], self._steps_done[-1]["range"][1]), lo)
            sure = st.get("sure", True)
            if (hi - lo == 1 and sure) or self._no_more or len(self._path) >= self.max_trials - 1:
                self._step_done(st, hi if hi - lo == 1 and sure else None,
                                (lo + 1, hi) if sure else (st["seg_lo"] + 1, st["seg_hi"]))
                continue
            pos, u, _ = self._arrays()
            keep = self._kept()
            a, b = st["seg_lo"], st["seg_hi"]
            left = keep & (pos >= a) & (pos <= lo)
            right = keep & (pos >= hi) & (pos <= b)
            inside = keep & (pos >= a) & (pos <= b)
            worse = float(u[left].mean()) > float(u[right].mean())
            child = type(self)(
                b - a + 1, higher_is_better=self.higher_is_better == worse,
                seed=self.seed + 1 + len(self._steps_done),
                max_trials=max(2 * MIN_ENDPOINT, int(inside.sum()) + self.max_trials - len(self._path)),
                confidence=self.confidence, min_effect=self.min_effect, parallel=self.parallel)
            child._check_models = False
            child._replayed = int(inside.sum())
            for j in np.flatnonzero(inside):
                child.tell(int(pos[j]) - a, self._path[self._obs_pathi[j]][1])
            if child.done:
                self._child_done(st, child)
                continue
            self._child = child
            return
        self._finish_several()

    def _ask_child(self, free: int) -> list[int]:
        assert self._child is not None
        lo = self._steps_todo[0]["seg_lo"]
        new = [lo + p for p in self._child.ask() if lo + p not in self._outstanding][:free]
        return new or list(self._outstanding)

    def _tell_child(self, position: int, value: float | None) -> None:
        if self._child is None:
            return
        st = self._steps_todo[0]
        if st["seg_lo"] <= position <= st["seg_hi"]:
            self._child.tell(position - st["seg_lo"], value)
        if self._child.done:
            child, self._child = self._child, None
            self._child_done(st, child)
            self._next_child()

    def _child_done(self, st: dict, child: "BisectionStrategy") -> None:
        v = child.verdict()
        st["child"], st["mass"] = v.status, v.mass
        lo = st["seg_lo"]
        if v.status == "culprit" and v.index is not None:
            self._step_done(st, lo + v.index, (lo + v.index, lo + v.index))
        elif v.range is not None:
            self._step_done(st, None, (lo + v.range[0], lo + v.range[1]))
        else:
            self._step_done(st, None, (st["lo"] + 1, st["hi"]))

    def _step_done(self, st: dict, index: int | None, rng: tuple[int, int]) -> None:
        self._steps_todo.pop(0)
        self._steps_done.append(dict(st, index=index, range=rng))

    def _finish_several(self) -> None:
        pos, u, _ = self._arrays()
        keep = self._kept()
        steps = []
        for st in self._steps_done:
            lo, hi = (st["index"] - 1, st["index"]) if st["index"] is not None else (st["lo"], st["hi"])
            good = keep & (pos >= st["seg_lo"]) & (pos <= lo)
            bad = keep & (pos >= hi) & (pos <= st["seg_hi"])
            effect, ci = self._effect_of(u[good], u[bad])
            steps.append({"index": st["index"], "range": [int(st["range"][0]), int(st["range"][1])],
                          "effect": effect, "effect_ci": list(ci) if ci is not None else None})
        # A step whose sub-bisection found no regression, or whose effect from the flat readings is
        # under half of min_effect, was the fit's noise: with one step left, that is the culprit.
        real = [st for st, d in zip(steps, self._steps_done)
                if d.get("child") != "no-regression" and st["effect"] is not None
                and abs(math.log(st["effect"])) >= self._d_min / 2]
        if len(real) == 1 and real[0]["index"] is not None:
            self._check = dict(self._check or {}, model="one")
            d = self._steps_done[steps.index(real[0])]
            if self._post is None or real[0]["index"] != int(np.argmax(self._post)):
                # the step the search named was not one (the flank's sub-bisection found the change)
                self._answer = {"culprit": real[0]["index"], "mass": d.get("mass"),
                                "range": tuple(real[0]["range"])}
            self._finish("culprit", reason="posterior")
            return
        steps = real if len(real) >= 2 else steps
        # The sub-bisections have read across both stretches by now, which the choice between a
        # slide and two steps (made on the search's readings, clustered around the first step)
        # had not: a slide pinned as two steps reads as one again, on everything read, when the
        # line fits clearly better (of 200 slides of 0.2% per commit, 24 were answered `several`;
        # on every read the line won by more than MODEL_MARGIN in 9 of 12 looked at, and no
        # answer of two steps 3% then 4% or a dip read below +1). Within MODEL_MARGIN, readings
        # where the two differ decide, as in the model phase; out of them, the better fit does.
        pos, u = self._fit_data()
        f = _models.fit_models(pos, u)
        if f is not None:
            d = _two_over_slide(f)
            self._check = dict(self._check or {}, refit_bic=d)
            if abs(d) < MODEL_MARGIN and self._set_probes(f, "slide", "two", pos, refit=True):
                self._phase = "refit"
                return
            if d < 0:
                self._check = dict(self._check, model="slide")
                self._finish_gradual(f)
                return
        first = steps[0]
        self._answer = {"steps": tuple(steps), "index": first["index"], "effect": first["effect"],
                        "ci": tuple(first["effect_ci"]) if first["effect_ci"] else None,
                        "range": (steps[0]["range"][0], steps[-1]["range"][1])}
        self._finish("several", reason="model-check")
