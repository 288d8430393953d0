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


def test_attribution_output_says_how_to_go_on():
    """``resume_with`` (decided by the campaign) becomes "the same command with --resume ..."."""
    base = {"good": "none", "bad": "all", "metric": "output_throughput", "trials": 80,
            "campaign": "20261130-021235-attribute-cba3", "candidates": [], "warnings": [],
            "status": "culprits", "culprits": ["mla-gather-cast"]}
    out = _text(dict(base, resume_with=[{"option": "--max-trials", "more_than": 80},
                                        {"option": "--strategy", "value": "thorough"}]))
    assert ("to go on with more trials in this campaign: the same command with --resume "
            "20261130-021235-attribute-cba3 --max-trials N (N > 80)") in out
    assert ("to look for a smaller culprit beside the named ones, with the trials already made: the same "
            "command with --resume 20261130-021235-attribute-cba3 --strategy thorough") in out
    assert "--resume" not in _text(base)


def test_every_entry_takes_the_typed_result_or_its_dict_alike():
    """The CLI passes the redacted ``to_dict()``; library callers may pass the typed result: the
    same text either way, and keys from a newer version (kept in ``.more``) change nothing."""
    from bisect_lab.render import bisect_result, render_sweep, run_result
    from bisect_lab.results import AttributionResult, BisectResult, RunResult, SweepNight

    def text(fn, res):
        buf = io.StringIO()
        fn(res, Console(file=buf, width=200, color_system=None))
        return buf.getvalue()
    run = {"campaign": "c1", "experiment": "demo", "metric": "tok", "higher_is_better": True,
           "arms": [{"arm": "none", "n": 3, "median": 100.0, "mean": 100.0, "cv": 0.01, "failed": 0},
                    {"arm": "all", "n": 3, "median": 80.0, "mean": 80.0, "cv": 0.01, "failed": 0}],
           "comparisons": [{"a": "none", "b": "all", "host": "local", "ratio": 0.8, "ci_low": 0.78, "ci_high": 0.82,
                            "p_value": 1e-4, "p_adjusted": 1e-4, "verdict": "different", "regression": True}],
           "resume_with": [{"option": "--repeat", "more_than": 3}], "a_newer_key": 1}
    bis = {"status": "culprit", "trials": 9, "campaign": "c2", "commit": "a" * 40, "posterior": 0.97,
           "effect": {"ratio": 0.8, "ci_low": 0.7, "ci_high": 0.9}}
    night = {"sweep": "nightly", "night": 3, "ref": "main", "commit": "b" * 40, "campaign": "c3", "metric": "tok",
             "higher_is_better": True, "regressions": [], "report_command": "bisect-lab report nightly",
             "series": [{"arm": "all", "status": "ok", "medians": [1.0, 1.01], "reason": "within the spread"}]}
    attr = {"status": "no-regression", "good": "none", "bad": "all", "metric": "tok", "trials": 6, "campaign": "c4"}
    for fn, d, cls in ((run_result, run, RunResult), (bisect_result, bis, BisectResult),
                       (render_sweep, night, SweepNight), (attribution_result, attr, AttributionResult)):
        assert text(fn, d) == text(fn, cls.from_dict(d)), fn.__name__
    out = text(run_result, run)
    # in a performance engineer's words, against the reference (a), never "different (regression)"
    assert "all is 20.0% slower than none (95% CI 18.0% .. 22.0% slower)" in out, out
    assert "different" not in out and "--resume c1 --repeat N (N > 3)" in out
    bis_out = text(bisect_result, bis)
    assert "first bad commit: " + "a" * 40 in bis_out, bis_out
    assert "effect: bad is 20.0% slower than good (95% CI 10.0% .. 30.0% slower)" in bis_out, bis_out
    assert "how sure: 97% that it is this commit" in bis_out and "posterior" not in bis_out
