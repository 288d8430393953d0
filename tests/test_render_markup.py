"""Rich markup in user text (experiment names, metric names, arms, factors) is printed as text."""
from rich.console import Console

from bisect_lab.render import attribution_result, run_result
from bisect_lab.render import render_sweep

M = "[/] [bold]x"


def console():
    return Console(record=True, width=300, color_system=None)


def test_run_result_experiment_and_metric_names_with_markup():
    c = console()
    run_result({"experiment": f"exp {M}", "campaign": "c1", "metric": f"tok{M}", "higher_is_better": True,
                "arms": [{"arm": f"all X={M}", "n": 1, "median": 1.0, "mean": 1.0, "cv": 0.01}],
                "comparisons": [], "secondary": [], "warnings": [M]}, c)
    out = c.export_text()
    assert f"exp {M}" in out and f"tok{M}" in out and f"all X={M}" in out


def test_attribution_candidates_and_plan_with_markup():
    c = console()
    attribution_result({"status": "inconclusive", "good": "none", "bad": f"all X={M}", "metric": M, "trials": 3,
                        "campaign": "c1", "candidates": [[f"X={M}", 0.5]], "plan": f"more of {M}"}, c)
    out = c.export_text()
    assert f"X={M} (0.50)" in out and f"more of {M}" in out


def test_sweep_rows_with_markup():
    c = console()
    render_sweep({"sweep": M, "night": 1, "ref": "main", "commit": "abc", "subject": M, "campaign": "c",
                  "metric": M, "higher_is_better": True, "report_command": M,
                  "series": [{"arm": f"all X={M}", "status": "ok", "medians": [1.0], "reason": M}],
                  "bisections": [{"arm": M, "commit": "a", "status": "culprit"}]}, c)
    out = c.export_text()
    assert f"all X={M}" in out and "[culprit]" in out and f"sweep {M}" in out
