"""Human output of the verdicts (rich), checked as text."""
import io

from rich.console import Console

from bisect_lab.render import attribution_result


def _text(res):
    buf = io.StringIO()
    attribution_result(res, Console(file=buf, width=200, color_system=None))
    return buf.getvalue()


def test_attribution_output_names_the_interaction_kind_and_term():
    est = {"ratio": 0.842, "ci_low": 0.814, "ci_high": 0.871, "p_value": 1e-6}
    res = {"status": "culprits", "culprits": ["env:OEA_ENABLE", "mla-gather-cast", "oea-topk"], "trials": 42,
           "campaign": "20261129-120954-attribute-50b5",
           "good": "none", "bad": "all OEA_ENABLE=1", "metric": "output_throughput",
           "regression": {"ratio": 0.61, "ci_low": 0.58, "ci_high": 0.64},
           "effects": [{"name": "mla-gather-cast", "kind": "main", "effect": {"ratio": 0.765, "ci_low": 0.75, "ci_high": 0.78},
                        "share": 0.56, "share_low": 0.52, "share_high": 0.6}],
           "interactions": [{"factors": ["oea-topk", "env:OEA_ENABLE"], "kind": "and", "term": est,
                             "description": "the regression appears only when oea-topk and env:OEA_ENABLE are both bad"}],
           "candidates": [], "warnings": []}
    out = _text(res)
    line = next(l for l in out.splitlines() if l.startswith("interaction:"))
    assert "oea-topk x env:OEA_ENABLE (and)" in line
    assert "only when oea-topk and env:OEA_ENABLE are both bad" in line
    assert "-15.8% [-18.6% .. -12.9%]" in line


def test_attribution_output_says_how_to_go_on_when_the_budget_cut_it_short():
    base = {"good": "none", "bad": "all", "metric": "output_throughput", "trials": 80,
            "campaign": "20261130-021235-attribute-cba3", "candidates": []}
    hint = "--resume 20261130-021235-attribute-cba3 --max-trials N (N > 80)"
    assert hint in _text(dict(base, status="inconclusive", culprits=[], warnings=["budget of 80 trials exhausted"]))
    # a culprit named, but the residual could not be attributed in the budget: the same advice
    partial = dict(base, status="culprits", culprits=["mla-gather-cast"],
                   warnings=["a residual regression could not be attributed within the budget"])
    assert hint in _text(partial)
    # an answer the budget did not limit: no advice
    assert "--resume" not in _text(dict(partial, warnings=[]))
    assert "--resume" not in _text(dict(base, status="no-regression", culprits=[], warnings=[]))


def test_a_screening_design_goes_on_with_more_rounds():
    res = {"good": "none", "bad": "all", "metric": "output_throughput", "trials": 36, "campaign": "C1",
           "candidates": [], "status": "inconclusive", "culprits": [], "strategy": "screening", "repeats": 2,
           "max_trials": 200, "warnings": ["no factor significant: more rounds (--repeats) or the adaptive strategy"]}
    assert "--resume C1 --repeats N (N > 2)" in _text(res)
    assert "--resume C1 --max-trials N (N > 200)" in _text(dict(res, strategy="staged-attribution"))


def test_an_answer_that_cannot_rule_out_a_further_culprit_suggests_the_thorough_strategy():
    res = {"good": "none", "bad": "all", "metric": "output_throughput", "trials": 40, "campaign": "C2",
           "candidates": [], "status": "culprits", "culprits": ["big"], "strategy": "staged-attribution",
           "max_trials": 200, "warnings": ["the residual check stayed undecided after 12 readings of each arm: "
                                           "... a further culprit of up to 6% cannot be ruled out"]}
    assert "--resume C2 --strategy thorough" in _text(res)
    assert "--strategy thorough" not in _text(dict(res, strategy="staged-attribution (thorough)"))
    assert "--strategy thorough" not in _text(dict(res, warnings=[]))
