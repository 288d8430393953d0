"""Staged attribution: a culprit plus an env-gated interaction (the story's shape), and the contract."""
import re
from dataclasses import replace

import numpy as np
import pytest

from bisect_lab import attribute_factors
from bisect_lab.strategies.staged import StagedAttribution
from bisect_lab.strategies import staged_residual

FACTORS = ["mla", "nccl", "oea", "sm120", "env:OEA"]


def story(mla=0.75, pair=0.83, cv=0.04, seed=0):
    rng = np.random.default_rng(seed)
    calls = []

    def measure(active):
        calls.append(active)
        v = 1000.0 * (mla if "mla" in active else 1.0)
        if "oea" in active and "env:OEA" in active:      # hurts only with its variable set
            v *= pair
        return v * float(np.exp(rng.normal(0, cv)))
    return measure, calls


def test_culprit_plus_interaction_is_named_in_full():
    right = 0
    for seed in range(12):
        measure, calls = story(seed=100 + seed)
        v = attribute_factors(FACTORS, measure, seed=seed, max_trials=150)
        assert v.trials == len(calls)
        assert not set(v.culprits) & {"nccl", "sm120"}          # never the no-ops
        right += v.status == "culprits" and set(v.culprits) == {"mla", "oea", "env:OEA"}
    assert right >= 10, right


def test_single_culprit_costs_no_extra_stage():
    trials = []
    for seed in range(8):
        measure, calls = story(pair=1.0, cv=0.03, seed=200 + seed)
        v = attribute_factors(FACTORS, measure, seed=seed, max_trials=150)
        assert v.status == "culprits" and v.culprits == ["mla"]
        assert len(v.extra.get("stages", [])) <= 1
        trials.append(v.trials)
    # The residual check only looks closer when "good plus culprit" hints at a residual.
    assert np.mean(trials) <= 12 and max(trials) <= 24, trials


def test_no_regression_stays_no_regression():
    for seed in range(6):
        measure, _ = story(mla=1.0, pair=1.0, cv=0.03, seed=300 + seed)
        v = attribute_factors(FACTORS, measure, seed=seed, max_trials=150)
        assert v.status == "no-regression" and v.culprits == []


def test_same_observations_same_decisions():
    m1, c1 = story(seed=7)
    m2, c2 = story(seed=7)
    a = attribute_factors(FACTORS, m1, seed=3, max_trials=120)
    b = attribute_factors(FACTORS, m2, seed=3, max_trials=120)
    assert c1 == c2 and a.culprits == b.culprits


# a stage's own "out of budget" line, as the staged verdict reports it (a later stage's prefixed)
_BUDGET_LINE = re.compile(r"(stage \d+ \('good plus [^']*' vs 'bad'\): )?budget (of |ran out)")


def test_later_stages_warnings_say_which_arms_they_are_about():
    """At CV 15% the story's second stage runs out of budget with noise warnings of its own: each
    says it is about 'good plus' the first stage's culprits against 'bad', and comes after the
    note that explains why that stage ran; the first stage's lines stay as they were."""
    staged = 0
    for seed in range(6):
        measure, _ = story(cv=0.15, seed=500 + seed)
        v = attribute_factors(FACTORS, measure, seed=seed, max_trials=80)
        stages = v.extra.get("stages", [])
        if len(stages) < 2:
            continue
        staged += 1
        prefix = f"stage 2 ('good plus {', '.join(stages[1]['good_plus'])}' vs 'bad'): "
        later = [k for k, w in enumerate(v.warnings) if w.startswith(prefix)]
        assert later, v.warnings
        if stages[1].get("status") == "inconclusive":     # ran out of budget (most seeds here)
            assert any("budget of" in v.warnings[k] for k in later), v.warnings
        assert all(w.startswith(prefix) for w in v.warnings if "budget of" in w), v.warnings
        why = next(k for k, w in enumerate(v.warnings) if w.startswith("after naming"))
        assert why < min(later), v.warnings
        assert v.warnings[0].startswith("noisy arms"), v.warnings       # stage 1's, unprefixed
    assert staged >= 3, staged


def test_handed_over_stage_explains_itself_without_stale_budget_warnings():
    handed = 0
    for seed in range(12):
        measure, _ = story(seed=100 + seed)
        v = attribute_factors(FACTORS, measure, seed=seed, max_trials=150)
        stages = v.extra.get("stages", [])
        if len(stages) > 1 and stages[0]["status"] == "inconclusive":
            handed += 1
            assert any("without its own confirmation step" in w for w in v.warnings), v.warnings
            assert not any(_BUDGET_LINE.match(w) for w in v.warnings), v.warnings
            assert not any("found nothing left to explain" in w for w in v.warnings), v.warnings
    assert handed >= 1        # the story's first stage cannot express three culprits: it hands over


def test_a_stage_that_cannot_settle_hands_over_early_even_with_a_large_budget():
    """The story's first stage is sure of mla long before it could settle (three culprits are
    outside one stage's hypotheses): it hands over after STAGE_SOFT_TRIALS, not at 60% of a
    400-trial budget (240 trials, as it did), and the pattern is still named in full."""
    right, first, total = 0, [], []
    for seed in range(8):
        measure, calls = story(seed=900 + seed)
        v = attribute_factors(FACTORS, measure, seed=seed, max_trials=400)
        stages = v.extra["stages"]
        first.append(stages[0]["ended_after_trials"])
        total.append(v.trials)
        right += v.status == "culprits" and set(v.culprits) == {"mla", "oea", "env:OEA"}
    # without the cap three of these eight first stages ran to trial 240 (mean total 118 trials)
    assert max(first) <= 102, first
    assert np.mean(total) < 90, total
    assert right >= 7, right


def test_interactions_are_refitted_on_all_culprits_together():
    """The story's pair is oea x env:OEA (AND); mla is a plain main effect. Whatever each stage read
    into its own data, the final answer must say exactly that."""
    checked, exact = 0, 0
    for seed in range(12):
        measure, _ = story(seed=100 + seed)
        v = attribute_factors(FACTORS, measure, seed=seed, max_trials=150)
        if v.status != "culprits" or set(v.culprits) != {"mla", "oea", "env:OEA"}:
            continue
        checked += 1
        # the pair is always among the interactions; exactly "and" and nothing else in ~90% of runs
        # at this noise (docs/attribution.md): two chance-low "good plus OEA_ENABLE" readings can
        # give OEA_ENABLE a small own effect, and the pair then reads as synergy
        pairs = {frozenset(i.factors): i.kind for i in v.interactions}
        assert pairs.get(frozenset({"oea", "env:OEA"})) in ("and", "synergy"), v.interactions
        exact += [(set(i.factors), i.kind) for i in v.interactions] == [({"oea", "env:OEA"}, "and")]
        eff = {e.name: e for e in v.effects}
        assert eff["mla"].effect.ci_high < 0.9                      # 25% slower, clearly
        assert 0.5 < eff["mla"].share < 0.72, eff["mla"]          # truth: log 0.75 / log(0.75 * 0.83) = 0.61
        # shares of the regression good vs bad measured: about 1 together when all is explained
        assert 0.85 < sum(e.share for e in v.effects) < 1.15, v.effects
    assert checked >= 10 and exact >= checked - 2, (checked, exact)


def test_factor_probabilities_come_from_the_latest_stage_that_searched_them():
    for seed in range(12):
        measure, _ = story(seed=100 + seed)
        v = attribute_factors(FACTORS, measure, seed=seed, max_trials=150)
        stages = v.extra.get("stages", [])
        if v.status != "culprits" or len(stages) < 2:
            continue
        probs = dict(v.candidates)
        assert all(probs[c] >= 0.99 for c in v.culprits)
        assert probs["nccl"] < 0.1 and probs["sm120"] < 0.1, v.candidates     # stage 1 alone: up to 0.39


def test_small_own_effects_beside_a_large_joint_term_still_read_as_and():
    """The CPU demo: oea-topk and OEA_ENABLE each cost ~2% alone (measured, within noise of 0),
    -16% together. That is the AND pattern, not a 'synergy' of two culprits."""
    def story2(seed):
        rng = np.random.default_rng(seed)

        def measure(active):
            v = 1000.0 * (0.76 if "mla" in active else 1.0)
            v *= 0.98 if "oea" in active else 1.0
            v *= 0.98 if "env:OEA" in active else 1.0
            if "oea" in active and "env:OEA" in active:
                v *= 0.86
            return v * float(np.exp(rng.normal(0, 0.02)))
        return measure
    # What the product promises, not one floating-point path: the three culprits are named in
    # at least 5 of 6 seeds, and in those the pair {oea, OEA} is reported as `and` in at least
    # all but one. A 2% own effect at 2% noise is within one standard error of zero, so another
    # numpy / scipy build may read one seed's pair as synergy, or add a weak antagonism beside
    # the `and`: tolerated once, never as the rule, and the pair is never read as independent.
    full, pair_and, read = 0, 0, []
    for seed in range(6):
        v = attribute_factors(FACTORS, story2(400 + seed), seed=seed, max_trials=150)
        kinds = [(sorted(i.factors), i.kind) for i in v.interactions]
        read.append((sorted(v.culprits), kinds))
        if set(v.culprits) == {"mla", "oea", "env:OEA"}:
            full += 1
            pair_and += (["env:OEA", "oea"], "and") in kinds
    assert full >= 5, read
    assert pair_and >= full - 1, read


def test_noisy_machine_still_names_the_whole_pattern():
    """CV 8% (the CPU demo on a loaded 2-core box): a stage that names the big culprit and one
    member of the pair, or hands over unconfirmed, must check the residual properly. Before the
    sequential residual check about a third of such runs stopped at the big culprit alone."""
    right, trials = 0, []
    for seed in range(16):
        measure, calls = story(cv=0.08, seed=500 + seed)
        v = attribute_factors(FACTORS, measure, seed=seed, max_trials=150)
        assert not set(v.culprits) & {"nccl", "sm120"}
        right += v.status == "culprits" and set(v.culprits) == {"mla", "oea", "env:OEA"}
        trials.append(v.trials)
    assert right >= 14, (right, trials)


def test_decomposition_measures_each_culprit_alone_and_gives_up_on_an_arm_that_fails():
    """After several stages, "good plus one culprit" is measured (twice) for each culprit so that
    the pair can be told from its members; an arm that cannot run is given up after a few tries
    (3 as a confirmation arm inside a stage, 2 in the decomposition), not tried for ever."""
    for seed in range(4):
        measure, calls = story(seed=700 + seed)

        def failing(active):
            return None if active == frozenset({"oea"}) else measure(active)
        s = StagedAttribution(FACTORS, seed=seed, max_trials=150)
        from bisect_lab.strategies.base import drive
        v = drive(s, failing)
        if len(s.stages) < 2:
            continue                      # one stage: nothing to decompose
        alone = [o for o in s.observations if len(o.active) == 1]
        assert 2 <= sum(o.active == frozenset({"oea"}) for o in alone) <= 5, [sorted(o.active) for o in alone]
        for c in v.culprits:
            if c != "oea":
                assert sum(o.ok and o.active == frozenset({c}) for o in s.observations) >= 2, c


def test_large_culprit_is_found_from_one_pair_of_references():
    """A 25% culprit among 10: one good and one bad reading start the search (fast start); the
    splits and both confirmation arms then carry the gate. The issue's target is log2(N) + 4."""
    names = [f"f{k}" for k in range(10)]
    trials, refs = [], []
    for seed in range(12):
        rng = np.random.default_rng(500 + seed)
        culprit = names[seed % 10]
        calls = []

        def measure(active):
            calls.append(active)
            return 1000.0 * (0.75 if culprit in active else 1.0) * float(np.exp(rng.normal(0, 0.03)))
        v = attribute_factors(names, measure, seed=seed, max_trials=100)
        assert v.status == "culprits" and v.culprits == [culprit]
        # what the answer reports still stands on measurements: the regression, the plan, both checks
        assert v.regression is not None and 0.7 < v.regression.ratio < 0.8
        assert v.plan.trials_per_arm is not None
        assert {c.expect for c in v.confirmation} == {"good", "bad"} and all(c.ok for c in v.confirmation)
        trials.append(v.trials)
        refs.append(sum(1 for a in calls if len(a) in (0, 10)))
    assert np.mean(trials) <= 8, trials
    assert np.mean(refs) < 3.5, refs          # was 4 at least (2 + 2 before any split)


def test_residual_stage_on_heavy_tailed_noise_does_not_run_to_the_budget():
    """"Good plus C" reads better than "bad" in its first eight readings (the residual check's
    fresh ones included), so a residual stage starts; in truth the two are the same heavy-tailed
    level (Student-t, like the H200's eager decode), which would need hundreds of trials to call
    "no regression" (such runs went to the 400-trial budget before RESIDUAL_PATIENCE). A residual
    stage now ends after RESIDUAL_PATIENCE trials of its own; the answer keeps the first stage's
    culprit and says what is left.

    Asserted over ten seeds, not two: another numpy / scipy build moves single seeds from one
    path to another (a stalled residual stage in one, a quick extra name in the next). Measured
    with numpy 2.2.6 and 2.4.6: 4 of 10 seeds stall the residual stage (125-188 trials), 3 end
    in the first stage. Known and left to the robust-likelihood work: in 3 of 10 seeds the
    residual stage names `nccl` (a no-op) on this adversarial heavy tail."""
    names = ["mla", "nccl", "oea", "sm120", "env:OEA"]
    stalled = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        seen = {"n": 0}

        def measure(active):
            v = 1000.0 * (0.8 if "mla" in active else 1.0)
            if "mla" in active:
                v *= float(np.exp(rng.standard_t(3) * 0.1))
                if active == frozenset({"mla"}):
                    seen["n"] += 1
                    if seen["n"] <= 8:
                        v *= 1.4                  # the misleading first readings (fresh ones too)
            else:
                v *= float(np.exp(rng.normal(0, 0.006)))
            return v
        s = StagedAttribution(names, seed=seed, max_trials=400)
        while not s.done:
            for a in s.ask():
                s.tell(a, measure(a))
        v = s.verdict()
        assert v.status == "culprits" and "mla" in v.culprits, (seed, v.status, v.culprits)
        # never to the budget: without the patience these ran to 400. Locally the stalled seeds
        # end at 125-188 trials; CI's machine (same pinned numpy, another CPU) took seed 4 down a
        # longer path to 229, so the bound is the budget's three quarters, not the local maximum
        assert v.trials <= 300, (seed, v.trials)
        assert not any(_BUDGET_LINE.match(w) and "budget of" in w for w in v.warnings), (seed, v.warnings)
        if any("stayed undecided for" in w for w in v.warnings):
            stalled += 1
            assert len(s.stages) == 2 and v.culprits == ["mla"], (seed, v.culprits)
    assert stalled >= 3, stalled          # the patience path is what this test is about


def test_first_stage_uses_the_whole_budget_and_every_culprit_has_an_effect():
    """A 2% culprit at CV 3% with 150 trials. The first stage may use 85% of the budget while a
    residual stage might follow; when it ends there sure of nothing, it now gets the rest (the
    seeds below stopped "inconclusive" at 128 trials before). A culprit named by a stage that
    handed over before its own decomposition (seed 8) still comes with its effect."""
    names = [f"f{k}" for k in range(10)]
    named_late = 0
    for seed in (1, 6, 7, 8):
        rng = np.random.default_rng(seed)
        s = StagedAttribution(names, seed=seed, max_trials=150)
        while not s.done:
            for a in s.ask():
                s.tell(a, 1000 * (0.98 if "f3" in a else 1) * float(np.exp(rng.normal(0, 0.03))))
        v = s.verdict()
        assert v.trials <= 150
        if v.status == "culprits":
            assert v.culprits == ["f3"]
            (e,) = v.effects
            assert e.name == "f3" and e.effect.ci_low < 0.98 < e.effect.ci_high
            named_late += v.trials > 128
    assert named_late >= 2, named_late


def test_third_culprit_beside_a_named_pair_is_not_missed():
    """Three additive culprits (8%, 6%, 5%): the first stage explains the regression with the two
    largest as a pair. "Good plus the pair" then had to look as bad as "bad" for the stage to
    confirm, so the stage's own readings of it understate the 5% left: the thorough residual check
    judges fresh readings only, and looks until a residual of twice min_effect is implausible at
    95% (with the stage's readings and 80%, a third of these runs missed the third culprit)."""
    names = [f"p{k}" for k in range(8)]
    effects = {"p1": 0.92, "p4": 0.94, "p6": 0.95}
    full = 0
    for seed in range(12):
        rng = np.random.default_rng([31, seed])
        s = StagedAttribution(names, seed=seed, max_trials=250)
        ended = []
        while not s.done:
            batch = s.ask()
            if s.verdicts and not ended:
                ended.append(s.trials)
            for a in batch:
                v = 1000.0 * float(np.prod([e for f, e in effects.items() if f in a]))
                s.tell(a, v * float(np.exp(rng.normal(0, 0.03))))
        v = s.verdict()
        assert not set(v.culprits) - set(effects), v.culprits          # never a non-culprit
        full += v.status == "culprits" and v.culprits == sorted(effects)
        first = s._named(s.verdicts[0], 0)
        if len(first) >= 2:
            # the check measured "good plus those" again after the stage ended
            fresh = [o for o in s.observations[ended[0]:] if o.active == frozenset(first)]
            assert len(fresh) >= 3, (seed, first, len(fresh))
    assert full >= 10, full


def test_an_interaction_smaller_than_min_effect_is_not_reported():
    """The story plus a real but immaterial -1% mla x oea term at very low noise: the joint
    re-fit finds it significant, but a term smaller than min_effect (2%) is not an interaction
    worth reporting, just as a culprit must be worth min_effect. A -5% term still is."""
    def measure_with(extra, seed):
        rng = np.random.default_rng(seed)

        def measure(active):
            v = 1000.0 * (0.75 if "mla" in active else 1.0)
            if "oea" in active and "env:OEA" in active:
                v *= 0.83
            if "mla" in active and "oea" in active:
                v *= extra
            return v * float(np.exp(rng.normal(0, 0.002)))
        return measure

    for seed in range(3):
        v = attribute_factors(FACTORS, measure_with(0.99, 40 + seed), seed=seed, max_trials=200)
        pairs = {frozenset(i.factors): i.kind for i in v.interactions}
        assert pairs == {frozenset({"oea", "env:OEA"}): "and"}, v.interactions
    v = attribute_factors(FACTORS, measure_with(0.95, 50), seed=0, max_trials=200)
    pairs = {frozenset(i.factors): i.kind for i in v.interactions}
    assert pairs.get(frozenset({"mla", "oea"})) == "synergy", v.interactions


@pytest.mark.parametrize("plus_c, minus_c, hint", [
    (798.0, 950.0, True),     # a 5% residual read in both directions: a culprit left outside C
    (760.0, 1001.0, False),   # C explains it all
    (770.0, 1000.0, False),   # 1.5%: less than min_effect, however sure
    (798.0, None, True),      # one direction measured: judged on it alone
])
def test_residual_hint_reads_both_confirmation_directions(plus_c, minus_c, hint):
    """After one confirmed culprit C, "good plus C" better than "bad" and "bad minus C" worse than
    "good" are the same residual read twice; the hint averages them against the campaign's noise."""
    s = StagedAttribution(["a", "b", "c"], seed=0)
    readings = [((), 1000.0), ((), 1003.0), (("a", "b", "c"), 760.0), (("a", "b", "c"), 757.0),
                (("a",), plus_c)] + ([(("b", "c"), minus_c)] if minus_c else [])
    for arm, value in readings:
        s.tell(frozenset(arm), value)
    assert s._residual_hint(frozenset(), frozenset({"a"})) is hint


def _big_and_small(seed, big=0.80, small=0.95, cv=0.03, cv_hit=None):
    """p2 costs 1 - big, p5 costs 1 - small; with ``cv_hit`` every arm with a culprit in it has
    that noise instead of ``cv`` (unequal noise: CUDA graphs lost)."""
    rng = np.random.default_rng(seed)

    def measure(active):
        v = 1000.0 * (big if "p2" in active else 1.0) * (small if "p5" in active else 1.0)
        hit = "p2" in active or "p5" in active
        return v * float(np.exp(rng.normal(0, cv_hit if hit and cv_hit is not None else cv)))
    return measure


def test_thorough_mode_finds_a_small_culprit_beside_a_large_one():
    """A 20% culprit ends the first stage after a handful of trials; the 5% one beside it shows
    only in two confirmation readings, which the default reads as a hint (named in full in 7 of
    these 20 seeds). The thorough mode checks every answer with fresh readings and considers
    a partner a quarter as strong: all 20, at about 42 trials instead of 26."""
    names = [f"p{k}" for k in range(6)]
    both, default_both = 0, 0
    for seed in range(20):
        v = attribute_factors(names, _big_and_small(seed), seed=seed, max_trials=200, thorough=True)
        assert v.strategy == "staged-attribution (thorough)"
        assert not set(v.culprits) - {"p2", "p5"}, v.culprits
        both += v.culprits == ["p2", "p5"]
        d = attribute_factors(names, _big_and_small(seed), seed=seed, max_trials=200)
        default_both += d.culprits == ["p2", "p5"]
    assert both >= 18, both
    assert default_both < both, (default_both, both)


def test_a_hinted_lone_culprit_reads_on_until_the_residual_is_settled():
    """20% + 5% at CV 3%: in these two seeds the stage names the 20% culprit alone, its readings
    hint at a residual, and three fresh readings a side then had medians within min_effect: the
    check stopped there and the 5% culprit was lost. At this noise the check can settle, so it
    reads on (the sequential rule) and names both."""
    names = [f"p{k}" for k in range(6)]
    for seed in (2, 8):
        v = attribute_factors(names, _big_and_small(seed), seed=seed, max_trials=300)
        assert v.culprits == ["p2", "p5"], (seed, v.status, v.culprits, v.trials)


def test_a_started_residual_check_runs_to_its_end():
    """20% + 5% at CV 3%: the stage names the 20% culprit alone and its readings hint at a
    residual. The check used to read the hint again after every fresh pair (the hint reads all of
    the two arms' readings) and, in these seeds, stopped when one fresh pair read close: the 5%
    culprit was lost. Once started, the check now decides by its own sequential rule."""
    names = [f"p{k}" for k in range(6)]
    for seed in (5, 53):
        s = StagedAttribution(names, seed=seed, max_trials=300)
        v = _run_to_end(s, _big_and_small(seed))
        assert 0 in s._hinted, seed
        assert v.culprits == ["p2", "p5"], (seed, v.status, v.culprits, v.trials)


def test_a_chance_hint_that_fresh_readings_do_not_bear_out_ends_the_check():
    """A lone 20% culprit whose confirmation readings hinted at a residual by chance: once three
    fresh readings a side show "bad" no worse than "good plus p2", the check ends there instead of
    reading on until a residual of 1.5 x min_effect is ruled out (a fourth reading a side here)."""
    names = [f"p{k}" for k in range(6)]
    bad = frozenset(names)
    for seed in (47, 83, 99):
        s = StagedAttribution(names, seed=seed, max_trials=300)
        v = _run_to_end(s, _big_and_small(seed, small=1.0))
        assert v.culprits == ["p2"] and 0 in s._hinted, (seed, v.culprits, s._hinted)
        fresh = [o for o in s.observations[s._ended[0]:] if o.active == bad]
        assert len(fresh) == staged_residual.RESIDUAL_REPEATS, (seed, len(fresh))


def test_cli_attribute_with_the_thorough_strategy(tmp_path):
    import json
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_cli_run import cli
    from toyexp import make_toy
    # the experiment file's [design] strategy is the default of --strategy
    toy = make_toy(tmp_path, effects={"big": 0.8, "small": 0.94, "noop": 1.0}, design='strategy = "thorough"')
    p = cli(tmp_path, "attribute", toy, "--good", "none", "--bad", "all", "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["status"] == "culprits" and res["culprits"] == ["big", "small"], res
    assert res["strategy"] == "staged-attribution (thorough)"
    bad = cli(tmp_path, "attribute", toy, "--good", "none", "--bad", "all", "--strategy", "careful")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def _run_to_end(s, measure):
    while not s.done:
        for a in s.ask():
            s.tell(a, measure(a))
        # the progress line's total: never below the trials made, nor past the budget
        assert min(s.max_trials, s.trials + (0 if s.done else 1)) <= s.estimated_total() <= s.max_trials
    return s.verdict()


def test_a_residual_check_that_stays_undecided_says_so():
    """At CV 15% twelve readings of each arm cannot tell a 7% residual from none: the answer keeps
    the culprit and says a further one cannot be ruled out, not that nothing is left."""
    names = [f"p{k}" for k in range(5)]
    # Over ten seeds: the culprit is kept in every one, and the answer says a further one cannot
    # be ruled out in all but a seed or two (where "bad" happened to read better than "good plus
    # p2": a further culprit is then unlikely from the readings themselves). Before, only the
    # seeds whose three readings looked material were looked at again; 9 of 10 said nothing.
    said = []
    for seed in range(10):
        v = attribute_factors(names, _big_and_small(seed, big=0.7, small=0.93, cv=0.15), seed=seed,
                              max_trials=300, thorough=True)
        assert "p2" in v.culprits, (seed, v.culprits)
        assert not any("nothing left to explain" in w for w in v.warnings), v.warnings
        said.append(any(w.startswith("the residual check stayed undecided after ")
                        and "cannot be ruled out" in w for w in v.warnings))
    assert sum(said) >= 8, said


@pytest.mark.parametrize("budget, words", [(16, "the budget ran out before the residual check"),
                                           (18, "the budget ran out during the residual check")])
def test_a_residual_check_cut_short_by_the_budget_says_so(budget, words):
    """A 25% culprit beside a 5% one, on a budget too small to look for the second: the answer
    names the first and says a further culprit cannot be ruled out (it used to say the residual
    check "found nothing left to explain")."""
    names = [f"p{k}" for k in range(6)]
    s = StagedAttribution(names, seed=0, max_trials=budget, thorough=True)
    v = _run_to_end(s, _big_and_small(0, big=0.75))
    assert v.culprits == ["p2"] and v.trials >= budget - 1      # the check reads in pairs
    assert any(w.startswith(words) and "cannot be ruled out" in w for w in v.warnings), v.warnings
    assert not any("nothing left to explain" in w for w in v.warnings), v.warnings
    assert s.residual_unsettled        # what `attribute` turns into "--resume ... --strategy thorough"
    settled = StagedAttribution(names, seed=0, max_trials=200, thorough=True)
    _run_to_end(settled, _big_and_small(0, big=0.75))
    assert not settled.residual_unsettled


def test_progress_total_covers_the_residual_check():
    names = [f"p{k}" for k in range(6)]
    for seed in range(4):
        v = _run_to_end(StagedAttribution(names, seed=seed, max_trials=200, thorough=True),
                        _big_and_small(seed))
        assert v.status == "culprits"


def test_shares_are_of_the_measured_regression_so_a_missed_culprit_shows():
    """A lone culprit's share used to be 100% by construction (its term over the sum of the
    terms). It is its effect over the regression the good and bad arms' own readings show: about
    1 when it explains it all, about 0.81 (log 0.8 / log 0.76) when a 5% culprit beside it went
    unnamed. With fewer than two readings of either reference (a fast start) there is no such
    measure: 100% with no interval."""
    import math
    names = [f"p{k}" for k in range(6)]
    alone, beside = [], []
    for seed in range(16):
        # alone (10%: the references are read more than once): the interval holds 100%
        v = attribute_factors(names, _big_and_small(seed, big=0.9, small=1.0), seed=seed, max_trials=200)
        assert v.culprits == ["p2"]
        e = v.effects[0]
        if math.isnan(e.share_low):
            assert e.share == pytest.approx(1.0)
        else:
            assert e.share_low < 1.0 < e.share_high, e
            alone.append(e.share)
        v = attribute_factors(names, _big_and_small(seed), seed=seed, max_trials=200)
        if v.culprits == ["p2"] and not math.isnan(v.effects[0].share_low):
            beside.append(v.effects[0].share)
        elif v.culprits == ["p2", "p5"]:
            assert 0.8 < sum(e.share for e in v.effects) < 1.2, v.effects
    assert len(beside) >= 3 and np.mean(beside) < 0.92, beside
    assert len(alone) >= 5 and abs(np.mean(alone) - 1) < 0.1, alone


def test_cli_progress_never_counts_past_its_total(tmp_path):
    """The residual check reads two arms at a time; the progress total used to allow for one
    ("[52/51]" on the CPU demo)."""
    import re
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_cli_run import cli
    from toyexp import make_toy
    toy = make_toy(tmp_path, effects={"big": 0.8, "small": 0.94, "noop": 1.0})
    p = cli(tmp_path, "attribute", toy, "--good", "none", "--bad", "all", "--strategy", "thorough",
            timeout=300)
    assert p.returncode == 0, p.stderr
    counts = [(int(a), int(b)) for a, b in re.findall(r"^\[(\d+)/(\d+)", p.stderr, re.M)]
    assert len(counts) >= 10, p.stderr[-2000:]
    assert all(n <= total for n, total in counts), [c for c in counts if c[0] > c[1]]
    assert "culprits: big, small" in p.stdout, p.stdout


@pytest.mark.parametrize("small, cv, cv_hit", [(0.95, 0.03, None), (0.90, 0.006, 0.08)],
                         ids=["equal-noise", "unequal-noise"])
def test_share_intervals_cover_the_true_shares(small, cv, cv_hit):
    """Calibration: a 20% and a 5% culprit (true shares log 0.8 / log 0.76 = 0.813 and 0.187),
    named in full by the thorough mode on 60 seeds: the 95% share intervals, drawn from the terms'
    and the references' joint distribution, hold the truth 95.8% of the time (118 intervals).
    With unequal noise (0.6% on the good level, 8% wherever a culprit is in: a 20% and a 10%
    culprit), though the joint distribution uses the fit's pooled error: 96.4% (112 intervals)."""
    import math
    names = [f"p{k}" for k in range(6)]
    truth = {"p2": math.log(0.8) / math.log(0.8 * small)}
    truth["p5"] = 1 - truth["p2"]
    covered = []
    for seed in range(60):
        v = attribute_factors(names, _big_and_small(seed, small=small, cv=cv, cv_hit=cv_hit), seed=seed,
                              max_trials=200, thorough=True)
        if v.culprits != ["p2", "p5"]:
            continue
        for e in v.effects:
            if e.name in truth and not math.isnan(e.share_low):
                covered.append(e.share_low <= truth[e.name] <= e.share_high)
    assert len(covered) >= 100, len(covered)
    assert 0.9 <= np.mean(covered) <= 0.99, np.mean(covered)


def _spread(seed, names, n_small=5, each=0.006, cv=0.005):
    """A regression spread over several factors, each far below min_effect (3% in all)."""
    rng = np.random.default_rng([23, seed])
    small = set(names[:n_small])

    def measure(active):
        return 1000.0 * (1 - each) ** len(small & set(active)) * float(np.exp(rng.normal(0, cv)))
    return measure


@pytest.mark.parametrize("rule", [True, False])
def test_a_regression_spread_over_small_factors_names_none(rule):
    """Five factors of 0.6% each (3% in all) at CV 0.5%: the whole regression is confirmed and one
    of its parts reaches posterior 0.99 (the hypotheses hold one culprit or a pair, so "one 3%
    factor" and "five of 0.6%" are not told apart), but its own effect is confidently below the
    2% minimum. Without the rule 5 of these 8 seeds named one; with it none, and the answer says
    the regression is confirmed but not attributed, the candidates listed."""
    names = [f"p{k}" for k in range(8)]
    named, said = 0, 0
    for seed in range(8):
        s = StagedAttribution(names, seed=seed, max_trials=150)
        s.small_effect_rule = rule
        v = _run_to_end(s, _spread(seed, names))
        named += bool(v.culprits)
        if rule:
            assert v.status != "culprits" and not v.effects, (seed, v.culprits)
            said += any("confirmed but not attributed" in w and "where the probability sits" in w
                        for w in v.warnings)
    if rule:
        assert named == 0 and said >= 3, (named, said)
    else:
        assert named >= 3, named          # the case the rule is for (fails without it)


def test_the_small_effect_rule_keeps_a_culprit_at_the_minimum_effect():
    """A lone 3% culprit at CV 1% is still named: its interval reaches past 2%."""
    names = [f"p{k}" for k in range(8)]
    for seed in range(4):
        rng = np.random.default_rng([29, seed])
        v = attribute_factors(names, lambda a: 1000.0 * (0.97 if "p5" in a else 1.0)
                              * float(np.exp(rng.normal(0, 0.01))), seed=seed, max_trials=200)
        assert v.culprits == ["p5"] and "below_min_effect" not in v.extra, (seed, v.culprits)



def test_the_small_effect_rule_drops_only_the_small_culprit_and_keeps_an_and_pair():
    """Of a named 10% culprit and a 0.5% one, only the latter goes (its effect and its group row
    with it); an AND pair whose members have no main effect of their own is judged by its joint
    term and stays."""
    from bisect_lab.verdicts import AttributionVerdict, FactorEffect, RatioEstimate

    def term(name, r, lo, hi, kind="main"):
        return FactorEffect(name, kind, RatioEstimate(r, lo, hi), 0.5, 0.4, 0.6)
    s = StagedAttribution(["a", "b", "c", "d"], seed=0)
    v = AttributionVerdict(status="culprits", culprits=["a", "b"], trials=50,
                           effects=(term("a", 0.90, 0.88, 0.92), term("b", 0.995, 0.99, 1.0)),
                           candidates=(("a", 1.0), ("b", 0.99)),
                           extra={"structure": {"groups": [{"factors": ["a"], "text": "a: -10%"},
                                                           {"factors": ["b"], "text": "b: -0%"}]},
                                  "drop_alone": [{"factor": "a"}, {"factor": "b"}]})
    out = s._without_small(v)
    assert out.status == "culprits" and out.culprits == ["a"] and [e.name for e in out.effects] == ["a"]
    assert out.extra["below_min_effect"] == ["b"] and out.extra["structure"]["text"] == "a: -10%"
    assert [d["factor"] for d in out.extra["drop_alone"]] == ["a"]
    assert any(w.startswith("b: not named: its own effect is confidently below") for w in out.warnings)
    pair = AttributionVerdict(status="culprits", culprits=["c", "d"], trials=50,
                              effects=(term("c", 1.0, 0.99, 1.01), term("d", 1.0, 0.99, 1.01),
                                       term("c*d", 0.9, 0.88, 0.92, "interaction")))
    assert s._without_small(pair) is pair


def test_a_culprit_named_without_its_own_confirmation_needs_its_effect_to_show():
    """A factor a first stage was sure of when it handed over (no confirmation step of its own) is
    named only when its own effect's interval excludes "no change": a no-op that a heavy-tailed
    false regression had put at posterior 0.99 (-0.5%, -3.9% .. +3.0%) becomes a candidate, the
    answer inconclusive; a confirmed stage's culprit, or one whose effect shows, stays."""
    from bisect_lab.verdicts import AttributionVerdict, FactorEffect, RatioEstimate

    def term(name, r, lo, hi, kind="main"):
        return FactorEffect(name, kind, RatioEstimate(r, lo, hi), 1.0, float("nan"), float("nan"))
    s = StagedAttribution(["a", "b", "c", "d"], seed=0)
    noop = AttributionVerdict(status="culprits", culprits=["a"], trials=295,
                              effects=(term("a", 0.995, 0.961, 1.030),), candidates=(("a", 0.99),),
                              regression=RatioEstimate(0.961, 0.929, 0.994),
                              warnings=("a: named by a stage that ran out of budget before its confirmation "
                                        "step (posterior >= 0.99)",))
    assert s._without_small(noop) is noop          # confirmed by its own stage: not this rule's business
    s._unconfirmed = {"a"}
    out = s._without_small(noop)
    assert out.status == "inconclusive" and out.culprits == [] and out.extra["unshown"] == ["a"]
    assert any(w.startswith("a: not named: no confirmation step of its own") for w in out.warnings)
    assert any("confirmed but not attributed: the factor the search was sure of shows no effect" in w
               for w in out.warnings)
    assert not any(w.startswith("a: named by") for w in out.warnings)
    shows = replace(noop, effects=(term("a", 0.96, 0.94, 0.98),))
    assert s._without_small(shows) is shows
    # an AND pair judged by its joint term, which shows
    s._unconfirmed = {"c", "d"}
    pair = AttributionVerdict(status="culprits", culprits=["c", "d"], trials=50,
                              effects=(term("c", 1.0, 0.97, 1.03), term("d", 1.0, 0.97, 1.03),
                                       term("c*d", 0.9, 0.88, 0.92, "interaction")))
    assert s._without_small(pair) is pair


def test_heavy_tailed_null_campaigns_rarely_name_a_factor():
    """No regression at all, Student-t(3) noise at CV 14% (the H200's eager path at its worst):
    a factor is named in at most 5% of campaigns (1 of these 40, at 130 trials). A calibration of
    the promise, not of the rule above alone: on the benchmark's cell (simulate_attribution.py
    --robust --only t3none14, 100 seeds) the rule took the false names from 3% to 1%."""
    names = [f"f{k}" for k in range(10)]
    named = []
    for seed in range(40):
        rng = np.random.default_rng([23, 14, seed])
        v = attribute_factors(names, lambda a: 1000.0 * float(np.exp(0.14 / np.sqrt(3) * rng.standard_t(3))),
                              seed=seed, max_trials=400)
        if v.culprits:
            named.append((seed, v.culprits, v.trials))
    assert len(named) <= 2, named


def test_a_4_percent_third_culprit_is_found_beside_a_named_pair():
    """Three additive culprits of 10%, 6% and 4% at CV 3% among ten factors (issue #23's cell):
    after the first stage names the two larger ones, the 4% left is twice min_effect, the edge of
    what the residual check used to rule out. It stopped after three fresh readings a side whose
    medians were within min_effect, and ruled out "twice min_effect" at 12 readings at most: the
    third culprit was missed in 35-40% of runs. It now reads on (up to 20 a side) until 1.5 x
    min_effect is implausible, so the third culprit's residual starts a stage of its own."""
    names = [f"f{k}" for k in range(10)]
    full = 0
    for seed in range(20):
        rng = np.random.default_rng([23, 1064, seed])
        culprits = rng.choice(10, size=3, replace=False)
        effects = {names[k]: e for k, e in zip(culprits, (0.90, 0.94, 0.96))}

        def measure(active):
            v = 1000.0 * float(np.prod([e for f, e in effects.items() if f in active]))
            return v * float(np.exp(rng.normal(0, 0.03)))
        v = attribute_factors(names, measure, seed=seed, max_trials=400)
        assert not set(v.culprits) - set(effects), (seed, v.culprits)      # never a non-culprit
        full += v.status == "culprits" and v.culprits == sorted(effects)
    assert full >= 17, full


def test_a_first_stage_that_hands_over_names_what_it_was_sure_of(monkeypatch):
    """A first stage hands over on its posterior of the last ask, a batch behind; its verdict reads
    every reading. They had disagreed across 0.99 (a 3-way AND at 0.993 vs 0.988): the stage named
    nothing, took the rest of the budget with no way to hand over again, and ran to 400 trials to
    name a wrong third factor. Seen with the lack-of-fit test at p < 1e-3 (benchmark cell and3,
    seed 63); the invariant holds at any p: a stage that hands over names something."""
    import os
    from bisect_lab.strategies import attribution_fit
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import simulate_attribution as sa
    monkeypatch.setattr(attribution_fit, "MISFIT_P", 1e-3)
    names, measure, truth, _ = sa.seeded_measure("and3", 10, 63)
    s = StagedAttribution(names, seed=63, max_trials=400)
    handed = []
    original = s._hand_over

    def hand_over(stage):
        out = original(stage)
        if out and len(s.stages) == 1:
            handed.append(s._named(stage.verdict(), 0))
        return out
    monkeypatch.setattr(s, "_hand_over", hand_over)
    while not s.done:
        for arm in s.ask():
            s.tell(arm, measure(arm))
    v = s.verdict()
    assert handed and all(handed), handed
    assert v.status == "culprits" and v.culprits == truth and v.trials < 200, (v.culprits, v.trials)


@pytest.mark.parametrize("key, rep, why", [
    ("stall5c", 1, "handed over before its confirmation step because its readings fit no one-stage answer"),
    ("t3h", 3, "ran out of budget before its confirmation step"),
])
def test_the_note_on_an_unconfirmed_culprit_says_why_its_stage_stopped_short(monkeypatch, key, rep, why):
    """A first stage hands over at its share of the budget or, before it, when no one-stage answer
    fits its readings. The answer's note said "ran out of budget" for both; a misfit hand-over
    (stalls, seed 1: at 124 of 400 trials) now says so, in the report's words too."""
    import os
    from bisect_lab import render
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import simulate_attribution as sa
    names, measure, truth, _ = sa.seeded_measure(key, 10, rep)
    s = StagedAttribution(names, seed=rep, max_trials=400)
    while not s.done:
        for arm in s.ask():
            s.tell(arm, measure(arm))
    v = s.verdict()
    notes = [w for w in v.warnings if ": named by a stage that " in w]
    assert len(notes) == 1 and why in notes[0], v.warnings
    other = ("ran out of budget" if "handed over" in why else "handed over")
    assert other not in notes[0]
    plain = render._plain_note(notes[0])
    assert plain != notes[0] and "not yet re-measured on its own" in plain
    assert v.status == "culprits" and set(truth) <= set(v.culprits)
