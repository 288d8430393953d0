"""The answer's structure (issue #23): redundancy (OR) and gated (AND) factors reported as such,
chosen by the measured arms, with "what dropping X alone gives" predicted and checked against the
readings of that arm; a gate the readings require named with its patch."""
import json
import math
import re

import numpy as np

from bisect_lab import attribute_factors
from bisect_lab.strategies import structure as shapes

FACTORS = [f"f{k}" for k in range(8)]


def or_story(seed, cv=0.03):
    """f1 and f4 each send decoding off its fast path (-82%), both still -82%; f6 alone -10%."""
    rng = np.random.default_rng(seed)

    def measure(active):
        lv = math.log(0.18) if ("f1" in active or "f4" in active) else 0.0
        lv += math.log(0.9) if "f6" in active else 0.0
        return 100.0 * math.exp(lv + rng.normal(0, cv))
    return measure


def additive(seed, cv=0.03):
    rng = np.random.default_rng(seed)

    def measure(active):
        lv = sum(math.log(0.9) for f in ("f1", "f4") if f in active)
        return 100.0 * math.exp(lv + rng.normal(0, cv))
    return measure


def test_an_or_truth_is_reported_as_redundancy_with_drop_alone_near_zero():
    measured = 0
    for seed in range(3):
        v = attribute_factors(FACTORS, or_story(seed), seed=seed, max_trials=300)
        assert v.culprits == ["f1", "f4", "f6"], (seed, v.culprits, v.warnings)
        st = v.extra["structure"]
        assert st["kind"] == "or", (seed, st)
        ors = [g for g in st["groups"] if g["kind"] == "or"]
        assert [g["factors"] for g in ors] == [["f1", "f4"]], st
        assert 0.15 < ors[0]["effect"]["ratio"] < 0.21
        assert "either of f1, f4 does the whole damage" in st["text"]
        assert {i.kind for i in v.interactions if set(i.factors) == {"f1", "f4"}} == {"or"}
        # the effects are the structure's terms: no "-64%" main effect of a redundant member
        assert {e.name for e in v.effects} >= {"f1|f4", "f6"}, v.effects
        drop = {d["factor"]: d for d in v.extra["drop_alone"]}
        for f in ("f1", "f4"):
            d = drop[f]
            # dropping one member alone changes nothing: the other still does the whole damage
            assert abs(d["predicted_change"]) < 0.05, d
            assert d["predicted_low"] <= d["predicted"] <= d["predicted_high"]
            if d["measured"] is not None:
                measured += 1
                assert d["agrees"], d
        # dropping the independent third recovers its 10%
        assert 0.05 < drop["f6"]["predicted_change"] < 0.17, drop["f6"]
        assert not v.extra["model_check"], v.warnings
    assert measured, "no drop-alone arm of an OR member was measured in three campaigns"


def test_an_additive_truth_is_not_called_or():
    for seed in range(3):
        v = attribute_factors(FACTORS, additive(seed), seed=seed, max_trials=300)
        assert v.culprits == ["f1", "f4"], (seed, v.culprits)
        assert v.extra["structure"]["kind"] == "additive", v.extra["structure"]
        assert not [i for i in v.interactions if i.kind in ("or", "and")], v.interactions
        for d in v.extra["drop_alone"]:
            assert 0.06 < d["predicted_change"] < 0.16, d      # dropping either recovers its 10%


def _arms(spec, reps, level, rng, cv=0.01):
    actives, y = [], []
    for arm in spec:
        for _ in range(reps):
            actives.append(frozenset(arm))
            y.append(level(frozenset(arm)) + rng.normal(0, cv))
    return actives, np.array(y)


def test_a_gate_the_readings_require_is_named_with_its_patch():
    """"topk" hurts only with "gate" set: named alone, the arms with topk but not gate read good."""
    rng = np.random.default_rng(3)
    level = lambda a: math.log(0.85) if {"topk", "gate"} <= a else 0.0     # noqa: E731
    arms = [(), ("topk", "gate", "x"), ("topk",), ("gate",), ("topk", "x"), ("gate", "x"), ("x",)]
    actives, y = _arms(arms, 3, level, rng)
    chosen, _ = shapes.choose(["topk"], actives, y)
    assert shapes.required_partners(chosen, ["topk"], ["gate", "x"], actives, y) == {"gate": "topk"}
    chosen, _ = shapes.choose(["gate", "topk"], actives, y)
    assert [shapes.group_kind(g) for g in chosen.groups] == ["and"]
    # a real lone culprit needs no partner
    level2 = lambda a: math.log(0.85) if "topk" in a else 0.0               # noqa: E731
    actives, y = _arms(arms, 3, level2, rng)
    chosen, _ = shapes.choose(["topk"], actives, y)
    assert shapes.required_partners(chosen, ["topk"], ["gate", "x"], actives, y) == {}


def test_a_drop_alone_arm_that_disagrees_with_the_model_is_flagged():
    """The H200 story read as independent effects: the additive fit of an OR truth predicts a
    recovery when one redundant member is dropped; the arm that was measured says otherwise."""
    rng = np.random.default_rng(5)
    level = lambda a: math.log(0.18) if a & {"a", "b"} else 0.0             # noqa: E731
    arms = [(), ("a", "b"), ("b",), ("a",)]
    actives, y = _arms(arms, 3, level, rng)
    mains = shapes.fit(((("a",),), (("b",),)), actives, y)
    rows = {d["factor"]: d for d in shapes.drop_alone(mains, ["a", "b"], frozenset({"a", "b"}), actives, y)}
    assert rows["a"]["agrees"] is False and rows["a"]["predicted_change"] > 1.0, rows["a"]
    chosen, _ = shapes.choose(["a", "b"], actives, y)
    assert [shapes.group_kind(g) for g in chosen.groups] == ["or"]
    rows = {d["factor"]: d for d in shapes.drop_alone(chosen, ["a", "b"], frozenset({"a", "b"}), actives, y)}
    assert rows["a"]["agrees"] is True and abs(rows["a"]["predicted_change"]) < 0.03, rows["a"]


def test_structures_are_every_partition_and_shape():
    s = shapes.structures(["a", "b"])
    labels = [[shapes.group_label(g) for g in x] for x in s]
    assert labels[0] == ["a", "b"]                       # additive first
    assert ["a*b"] in labels and ["a|b"] in labels and ["a|b", "a*b"] in labels
    three = {tuple(shapes.group_label(g) for g in x) for x in shapes.structures(["a", "b", "c"])}
    assert ("a|(b*c)",) in three and ("a", "b|c") in three and ("a*b*c",) in three


def test_cli_names_two_patches_that_each_cause_the_whole_regression(tmp_path):
    """A toy repo where patches synca and syncb each turn off the same fast path (-50%): the text
    output, --json and the report say either does the whole damage, and dropping one alone gives
    nothing back."""
    from gitrepos import GitRepo, PatchSpec, write_patchset
    from test_cli_run import cli
    from toyexp import make_toy

    exp = make_toy(tmp_path, effects={"synca": 1.0, "syncb": 1.0, "noop": 1.0})
    repo = GitRepo(tmp_path / "target")
    write_patchset(tmp_path / "patches", [
        PatchSpec("synca", repo.patch({"knobs_synca.py": "FACTORS['fast_path_off'] = 0.5\n"})),
        PatchSpec("syncb", repo.patch({"knobs_syncb.py": "FACTORS['fast_path_off'] = 0.5\n"})),
        PatchSpec("noop", repo.patch({"knobs_noop.py": "FACTORS['noop'] = 1.0\n"}))])
    p = cli(tmp_path, "attribute", exp, "--json", "--good", "none", "--bad", "all", "--max-trials", "80",
            timeout=500)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout)
    assert res["culprits"] == ["synca", "syncb"], res
    st = res["extra"]["structure"]
    assert st["kind"] == "or", st
    assert [g["factors"] for g in st["groups"] if g["kind"] == "or"] == [["synca", "syncb"]]
    for d in res["extra"]["drop_alone"]:
        assert abs(d["predicted_change"]) < 0.05, d
        assert d["agrees"] in (None, True), d
    assert res["effects"] and all("share" in e for e in res["effects"])
    text = cli(tmp_path, "attribute", exp, "--good", "none", "--bad", "all", "--max-trials", "80", timeout=500)
    assert text.returncode == 0, text.stderr[-2000:]
    out = " ".join(text.stdout.split())
    assert "structure: either of synca, syncb does the whole damage" in out, out
    assert "Dropping one factor alone from bad" in out, out
    rep = cli(tmp_path, "report", res["campaign"], "--format", "md", "--out", tmp_path / "r.md")
    assert rep.returncode == 0, rep.stderr[-2000:]
    md = (tmp_path / "r.md").read_text()
    assert re.search(r"Structure chosen by the measured arms \(redundancy \(OR\)\): either of synca, syncb", md), md
    assert "| drop alone from bad |" in md


def test_a_three_way_and_is_named_by_its_structure():
    """8% only when f1, f4 and f6 are all bad: no one- or two-factor hypothesis holds it, so the
    search may end undecided; the structure over its likely factors and their required partners
    then names all three, as one AND group."""
    for seed in range(3):
        rng = np.random.default_rng(100 + seed)

        def measure(active):
            lv = math.log(0.92) if {"f1", "f4", "f6"} <= active else 0.0
            return 100.0 * math.exp(lv + rng.normal(0, 0.03))
        v = attribute_factors(FACTORS, measure, seed=seed, max_trials=400)
        assert v.culprits == ["f1", "f4", "f6"], (seed, v.status, v.culprits, v.candidates[:4])
        groups = [g for g in v.extra["structure"]["groups"] if g["kind"] == "and"]
        assert [g["factors"] for g in groups] == [["f1", "f4", "f6"]], v.extra["structure"]


def test_structure_benchmark_smoke():
    """benchmarks/simulate_attribution.py --structure runs and prints both methods of its cells."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "simulate_attribution.py"), "--structure",
                        "--only", "gated15", "--reps", "2", "--jobs", "1"], capture_output=True, text=True,
                       timeout=300, cwd=root)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [line for line in p.stdout.splitlines() if "| attribution" in line or "| nostruct" in line]
    assert len(rows) == 2 and ("MET" in rows[0] or "MISSED" in rows[0]), p.stdout


def test_an_or_pair_read_from_one_reading_of_each_member_alone_stays_an_or_group():
    """Two patches that each turn off the same fast path (-50%, CV 1%), a third that does nothing:
    the arms with one member alone often hold one reading each, and "a, b and their interaction"
    (-50%/-51%/+99%) then fits that noise by a few BIC units. It predicts no measured arm apart from
    the OR group by the minimum effect, so the answer is the OR group (before: 4 of these 60
    seeds, 7 of 200, answered additive with an interaction)."""
    wrong = []
    for seed in range(60):
        rng = np.random.default_rng(seed)

        def measure(active, rng=rng):
            lv = math.log(0.5) if ("synca" in active or "syncb" in active) else 0.0
            return 100.0 * math.exp(lv + rng.normal(0, 0.01))
        v = attribute_factors(["noop", "synca", "syncb"], measure, seed=seed, max_trials=80)
        st = v.extra.get("structure") or {}
        if v.culprits != ["synca", "syncb"] or st.get("kind") != "or":
            wrong.append((seed, v.culprits, st.get("text")))
    assert len(wrong) <= 1, wrong


def _gate_readings(gate_alone_reads):
    """f1 costs 13% only with f2 (a gate), at the H200's unequal noise: the good level reads at CV
    0.5%, the slow arms scatter by 10-15%; ``gate_alone_reads``: the arm with f1 but not f2."""
    rng = np.random.default_rng(1)
    rows = [(frozenset(a), v) for a in ((), ("f0", "f3")) for v in 1000 * np.exp(rng.normal(0, 0.005, 6))]
    rows += [(frozenset(FACTORS[:6]), v) for v in (700, 1010, 820, 880, 760)]
    rows += [(frozenset({"f1", "f2", "f4"}), v) for v in (760, 800, 950, 870)]
    rows += [(frozenset({"f1", "f5"}), v) for v in gate_alone_reads]
    return [a for a, _ in rows], np.log([v for _, v in rows])


def test_a_gate_is_named_at_unequal_noise():
    """The arms with f1 but not its gate read at the good level, with the good level's 0.5%
    scatter: f2 is required beside f1. (A fit weighting readings by the level the answer puts them
    at, tried for the test below, weighed those precise readings at the slow level's noise and lost
    the gate.)"""
    actives, y = _gate_readings(1000 * np.exp(np.random.default_rng(2).normal(0, 0.005, 4)))
    chosen, _ = shapes.choose(["f1"], actives, y, min_effect=0.02)
    assert shapes.required_partners(chosen, ["f1"], ["f0", "f2", "f3", "f4", "f5"], actives, y,
                                    min_effect=0.02) == {"f2": "f1"}


def test_the_eager_paths_tail_is_not_read_as_a_partner(monkeypatch):
    """The H200 shape (a 10% culprit; the good arm at CV 0.6%, every arm with the culprit at 14%
    with a right tail), 20 factors: in these five seeds a few right-tail readings of the arms with
    the culprit but without some other factor made that factor its "required partner" under one
    pooled variance. Each arm's readings are now weighed at its own noise (its scatter, shrunk
    toward its level's), and the answer is the culprit alone."""
    import os
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import simulate_attribution as sa
    for rep in (104, 107, 118, 135, 157):
        names, measure, truth, _ = sa.seeded_measure("hetero", 20, rep)
        v = attribute_factors(names, measure, seed=rep, max_trials=400)
        assert v.culprits == truth, (rep, v.culprits, [w for w in v.warnings if "named with" in w])


def test_a_reading_discounted_as_a_stall_stays_out_of_the_structure_fit(monkeypatch):
    """One culprit 5% among 10, 3% of trials stalling 50% slower (seed 62): the stage discounted
    trial 13 as a stall and said so ("left out of every decision"), but the structure fit still
    read it, and the stall made its arm noisy enough that f09 became f02's "required partner".
    The structure fit now reads what the stages kept, and the answer is f02 alone."""
    import os
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import simulate_attribution as sa
    names, measure, truth, _ = sa.seeded_measure("stall5c", 10, 62)
    v = attribute_factors(names, measure, seed=62, max_trials=400)
    assert any("discounted as stalls" in w for w in v.warnings), v.warnings
    assert v.culprits == truth, (v.culprits, [w for w in v.warnings if "named with" in w])


def test_a_culprits_own_effect_leaves_out_the_readings_discounted_as_stalls(monkeypatch):
    """stall5c seed 39: the stage named f04 without its own confirmation step, so its effect on
    every measurement decides whether it is named. With the three discounted stalls in that fit
    the interval held no change (-3.6%, -8.3% to +1.3%) and the answer was inconclusive; without
    them f04 is named, as the truth has it."""
    import os
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import simulate_attribution as sa
    names, measure, truth, _ = sa.seeded_measure("stall5c", 10, 39)
    v = attribute_factors(names, measure, seed=39, max_trials=400)
    assert any("discounted as stalls" in w for w in v.warnings), v.warnings
    assert (v.status, v.culprits) == ("culprits", truth), (v.status, v.warnings)
