"""Reports: a real SQLite store filled with real TrialResults (run, attribution, bisection, sweep
campaigns), rendered to Markdown and HTML; the content a reader needs must be there."""
from __future__ import annotations

import base64
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from bisect_lab.errors import UsageError
from bisect_lab.model import TrialResult, TrialStatus
from bisect_lab.report import build_report, to_html, to_markdown, write_report
from bisect_lab.store import Store

PNG = b"\x89PNG\r\n\x1a\n"


def _fp(driver="550.54", temp=45, clocks=1980, tree="t1"):
    return {"tree": {"hash": tree}, "gpu": [{"name": "H200", "driver": driver, "temperature_c": temp,
                                             "clocks": {"sm": clocks}}], "python": "3.11.7"}


def _trial(cid, i, arm, value=None, *, status=TrialStatus.OK, error="", commit="a" * 40, fp=None, env=None,
           tag=None, t0=1.7e9):
    return TrialResult(campaign=cid, trial=i, arm=arm, status=status, host="gpu-box", started=t0 + 3 * i,
                       duration_s=2.5, metrics={"output_throughput": value} if value is not None else {},
                       error=error, commit=commit, tree_hash="th", fingerprint=fp, env_report=env or {}, tag=tag)


def _add(store, t, fpdata=None):
    store.add_trial(t, fingerprint_data=fpdata)


def _run_summary(store, cid, specs, **benchmark):
    """What ``run`` stores as its result for these trials (summaries.run_summary, as the campaign calls it)."""
    from bisect_lab.model import Arm, Benchmark, Experiment, Target
    from bisect_lab.results import RunResult
    from bisect_lab.summaries import run_summary
    exp = Experiment(None, "demo", Target("/x"), Benchmark("bench", **benchmark))
    trials = [t for t in store.trials(cid) if t.tag != "warmup"]
    return RunResult.from_dict(run_summary(exp, [Arm(a, frozenset()) for a in specs], trials, cid)).to_dict()


@pytest.fixture(params=["stored", "trials-only"])
def run_store(tmp_path, request):
    """A run campaign: 'all' is 25% slower than 'all-minus mla'; one crash; NCCL_ALGO missed a worker;
    the slowest trial ran with a throttled GPU (fingerprint differs in clocks). "stored": the
    campaign stored its RunResult, as ``run`` does; "trials-only": a result without comparisons
    (an older database), which the report computes from the trials: both must read the same."""
    store = Store(tmp_path / "results")
    cid = store.create_campaign("run", experiment="/x/demo.toml", experiment_name="demo",
                                params={"arms": ["all-minus mla", "all NCCL_ALGO=Tree"], "repeat": 6, "seed": 0})
    rng = np.random.default_rng(0)
    env_ok = {"entries": [{"var": "NCCL_ALGO", "expected": "Tree", "matched": 1, "total": 3}],
              "warnings": ["NCCL_ALGO reached 1 of 3 processes (missing in: scheduler_0, scheduler_1)"]}
    i = 0
    for r in range(6):
        for arm in (["all-minus mla", "all NCCL_ALGO=Tree"] if r % 2 else ["all NCCL_ALGO=Tree", "all-minus mla"]):
            base = 94.0 if arm == "all-minus mla" else 70.0
            v = base * (1 + rng.normal(0, 0.01))
            fp, data = ("f1", _fp()) if not (arm.startswith("all NCCL") and r == 5) else ("f2", _fp(clocks=1410, temp=83))
            if arm.startswith("all NCCL"):
                v = v * (0.9 if r == 5 else 1)
            _add(store, _trial(cid, i, arm, v, fp=fp, env=env_ok if "NCCL" in arm else None), data)
            i += 1
    _add(store, _trial(cid, i, "all-minus mla", status=TrialStatus.CRASHED,
                       error="benchmark exited with 1: RuntimeError: CUDA error: out of memory\nmore"))
    result = ({"metric": "output_throughput", "higher_is_better": True} if request.param == "trials-only"
              else _run_summary(store, cid, ["all-minus mla", "all NCCL_ALGO=Tree"]))
    store.finish_campaign(cid, "done", result)
    yield store, cid
    store.close()


def test_run_report_markdown_reads_well(run_store, tmp_path):
    store, cid = run_store
    path = write_report(store, cid[:15], fmt="md", out=tmp_path / "r" / "run.md")
    md = path.read_text()
    # the answer first: which arm is slower, by how much, with an interval
    answer = md.split("\n")[2]
    assert answer.startswith("> 🔴 `all NCCL_ALGO=Tree` is **2") and "lower** than `all-minus mla`" in answer
    assert re.search(r"is \*\*2[4-7]\.\d% slower\*\*", answer)
    # arms table with n and failures
    assert re.search(r"\| `all-minus mla` \| 6 \| 9[34]\.\d\d \|", md)
    assert "| `all NCCL_ALGO=Tree` | 6 |" in md
    assert "| repeat | 6 per arm |" in md
    # the env var that missed the workers
    assert "MISSED: only 6 of 18 processes" in md and "NCCL_ALGO reached 1 of 3 processes" in md
    # the fingerprint diff names the confounder (clocks, temperature), not just the tree
    assert "`gpu.0.clocks.sm`" in md and "1980" in md and "1410" in md and "`gpu.0.temperature_c`" in md
    # the failure with its error line
    assert "1 of 13 trials failed (1 crashed)" in md
    assert "RuntimeError: CUDA error: out of memory" in md and "more" not in md.split("## Failures")[1].split("|")[-2]
    # figures are written beside the file and linked relatively
    imgs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert imgs == ["run_files/run-order.png", "run_files/distributions.png"]
    for rel in imgs:
        assert (path.parent / rel).read_bytes().startswith(PNG)


def test_html_is_self_contained(run_store, tmp_path):
    store, cid = run_store
    path = write_report(store, cid, fmt="html", out=tmp_path / "run.html")
    page = path.read_text()
    srcs = re.findall(r"src='([^']+)'", page)
    assert len(srcs) == 2 and all(s.startswith("data:image/png;base64,") for s in srcs)
    for s in srcs:
        assert base64.b64decode(s.split(",", 1)[1]).startswith(PNG)
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "class='answer bad'" in page
    assert "<code>all NCCL_ALGO=Tree</code>" in page and "&lt;" not in page.split("<body>")[0]


def test_drift_is_called_out(tmp_path):
    store = Store(tmp_path / "r")
    cid = store.create_campaign("run", experiment="e", experiment_name="e", params={"arms": ["a", "b"], "seed": 1})
    for i in range(20):
        _add(store, _trial(cid, i, "a" if i % 2 else "b", 100 - i * 0.8))   # both arms slide down 16%
    store.finish_campaign(cid, "done", {})
    md = to_markdown(build_report(store, cid))
    assert "Drift: `b` trends down" in md and "`a` trends down over the campaign" in md


def _attribution_store(tmp_path):
    store = Store(tmp_path / "results")
    cid = store.create_campaign("attribute", experiment="/x/demo.toml", experiment_name="demo",
                                params={"good": "none", "bad": "all OEA_ENABLE=1", "seed": 0, "max_trials": 200})
    rng = np.random.default_rng(1)
    arms = {"none": 94, "all OEA_ENABLE=1": 60, "only mla-gather-cast": 66, "all-minus mla-gather-cast OEA_ENABLE=1": 80}
    i = 0
    for r in range(4):
        for a, lvl in arms.items():
            _add(store, _trial(cid, i, a, lvl * (1 + rng.normal(0, 0.01)), fp="f1"), _fp())
            i += 1

    def est(r, lo, hi):
        return {"ratio": r, "ci_low": lo, "ci_high": hi, "p_value": 1e-6, "n_a": 8, "n_b": 8}
    result = {"status": "culprits", "culprits": ["env:OEA_ENABLE", "mla-gather-cast", "oea-topk"], "trials": i,
              "confidence": 0.97, "regression": est(0.64, 0.62, 0.66), "metric": "output_throughput",
              "good": "none", "bad": "all OEA_ENABLE=1", "min_effect": 0.02, "higher_is_better": True,
              "factors": ["mla-gather-cast", "nccl-env-propagation", "oea-topk", "sm120-fixes", "env:OEA_ENABLE"],
              "effects": [
                  {"name": "mla-gather-cast", "kind": "main", "effect": est(0.70, 0.68, 0.72), "share": 0.8,
                   "share_low": 0.72, "share_high": 0.88},
                  {"name": "oea-topk*env:OEA_ENABLE", "kind": "interaction", "effect": est(0.85, 0.82, 0.88),
                   "share": 0.2, "share_low": 0.12, "share_high": 0.28},
                  {"name": "sm120-fixes", "kind": "main", "effect": est(1.001, 0.99, 1.012), "share": 0.0},
                  {"name": "nccl-env-propagation", "kind": "main", "effect": est(0.995, 0.985, 1.006), "share": 0.0}],
              "interactions": [{"factors": ["oea-topk", "env:OEA_ENABLE"], "kind": "and",
                                "term": est(0.85, 0.82, 0.88),
                                "description": "oea-topk costs 15% only when OEA_ENABLE=1"}],
              "candidates": [["mla-gather-cast", 0.99], ["oea-topk", 0.97], ["sm120-fixes", 0.02]]}
    store.finish_campaign(cid, "done", result)
    return store, cid


def test_attribution_report_names_culprits_and_plots_effects(tmp_path):
    store, cid = _attribution_store(tmp_path)
    rep = build_report(store, cid)
    md = to_markdown(rep)
    assert rep.status == "bad"
    # the answer in a performance engineer's words (#24 item 6); the signed ratios in the detail
    assert "explained by **env:OEA_ENABLE, mla-gather-cast, oea-topk** (97% sure)" in md
    assert "`all OEA_ENABLE=1` is 36.0% slower than `none` (95% CI 34.0% .. 38.0% slower)" in md
    assert "| `mla-gather-cast` | main | -30.0% | -32.0% .. -28.0% | 80% (72..88%) |" in md
    assert "| `sm120-fixes` | main | +0.1% |" in md
    assert "oea-topk costs 15% only when OEA_ENABLE=1" in md
    assert "| budget | 200 trials |" in md          # what it ran under (a resume may raise it)
    assert [f.name for s in rep.sections for f in s.blocks if hasattr(f, "png")][:1] == ["effects"]
    store.close()


def test_bisect_report_shows_the_path(tmp_path):
    store = Store(tmp_path / "results")
    shas = [f"{i:02d}" + "c" * 38 for i in range(9)]
    cid = store.create_campaign("bisect", experiment="e", experiment_name="e",
                                params={"good": shas[0], "bad": shas[8], "arm": "none", "seed": 0})
    path = [(0, 100.0), (8, 80.0), (0, 101.0), (8, 79.0), (4, 100.5), (6, 80.5), (5, 79.8), (5, 80.2), (4, 99.7)]
    for i, (p, v) in enumerate(path):
        _add(store, _trial(cid, i, "none", v, commit=shas[p]))
    _add(store, _trial(cid, 9, "none", status=TrialStatus.APPLY_FAILED, error="patch x does not apply", commit=shas[3]))
    store.finish_campaign(cid, "done", {
        "status": "culprit", "commit": shas[5], "index": 5, "mass": 0.96, "effect": 0.8, "effect_ci": [0.78, 0.82],
        "good": shas[0], "bad": shas[8], "arm": "none", "n": 9, "candidates": 8, "commits": shas,
        "commit_info": {"sha": shas[5], "subject": "attention: gather then cast"},
        "path": [[p, v] for p, v in path], "path_commits": [[shas[p], v] for p, v in path],
        "untestable": {shas[3]: "apply-failed: patch x does not apply"}, "metric": "output_throughput"})
    md = to_markdown(build_report(store, cid))
    assert (f"First bad commit: **`{shas[5][:12]}`** attention: gather then cast (96% sure); bad is 20.0% slower "
            "than good (95% CI 18.0% .. 22.0% slower)") in md
    assert f"| 5 | `{shas[5][:12]}` ← first bad | 2 | 80.00 | 0 |" in md
    assert f"| 3 | `{shas[3][:12]}` | 0 | - | 1 |" in md
    assert "![bisection-path]" in md
    store.close()


def test_sweep_report_and_unknown_name(tmp_path):
    from bisect_lab.stats.series import Detect, Night, judge_series
    store = Store(tmp_path / "results")
    rng = np.random.default_rng(2)
    nights = []
    for k in range(6):
        cid = store.create_campaign("sweep", experiment="e", experiment_name="e",
                                    params={"sweep": "nightly", "commit": f"{k}" * 40, "metric": "output_throughput",
                                            "ref": "main", "arms": ["all"]})
        vals = list((100 if k < 4 else 85) * (1 + rng.normal(0, 0.01, 4)))
        for i, v in enumerate(vals):
            _add(store, _trial(cid, i, "all", v, commit=f"{k}" * 40, t0=1.7e9 + 86400 * k))
        nights.append(Night(cid, k, f"{k}" * 40, {"all": vals}, None))
        j = judge_series(nights, "all", higher_is_better=True, min_effect=0.03, detect=Detect(permutations=49))
        res = {"sweep": "nightly", "series": [j], "metric": "output_throughput", "higher_is_better": True,
               "min_effect": 0.03, "regressions": [j["arm"]] if j["status"] == "regression" else []}
        nights[-1].judgement = res
        store.finish_campaign(cid, "done", res)
        time.sleep(0.01)       # campaigns are ordered by creation time
    rep = build_report(store, "nightly")
    md = to_markdown(rep)
    assert rep.status == "good"         # night 6 continues night 5's level: no second alert
    assert "| 5 |" in md and "**ALERT** all" in md.split("| 5 |")[1].split("\n")[0]
    assert "![sweep-series]" in md
    # the report of the alerted night itself, by campaign id
    night5 = store.campaigns("sweep")[4].id
    rep5 = build_report(store, night5)
    assert rep5.status == "bad" and "**Regression** on night 5" in rep5.answer
    with pytest.raises(UsageError, match="no campaign 'nope'"):
        build_report(store, "nope")
    store.close()


def test_cli_report_writes_html(run_store, tmp_path):
    store, cid = run_store
    out = tmp_path / "cli.html"
    p = subprocess.run([sys.executable, "-m", "bisect_lab", "--results", str(store.dir), "report", cid,
                        "--format", "html", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(out) and "data:image/png;base64," in out.read_text()
    p = subprocess.run([sys.executable, "-m", "bisect_lab", "--results", str(store.dir), "report", "nope"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "no campaign 'nope'" in p.stderr and "Traceback" not in p.stderr
    # "latest": the newest campaign, without looking its id up
    p = subprocess.run([sys.executable, "-m", "bisect_lab", "--results", str(store.dir), "report", "latest",
                        "--out", str(tmp_path / "latest.md")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert cid in (tmp_path / "latest.md").read_text()


def test_html_escapes_untrusted_text(tmp_path):
    store = Store(tmp_path / "r")
    cid = store.create_campaign("run", experiment="e", experiment_name="e", params={"arms": ["a"]})
    _add(store, _trial(cid, 0, "a", status=TrialStatus.CRASHED, error="<script>alert(1)</script>"))
    store.finish_campaign(cid, "done", {})
    page = to_html(build_report(store, cid))
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "No trial produced a measurement" in page
    store.close()


def test_inconclusive_attribution_says_what_is_likely_and_what_it_would_take(tmp_path):
    store = Store(tmp_path / "results")
    cid = store.create_campaign("attribute", experiment="e", experiment_name="e", params={"good": "none", "bad": "all"})
    for i in range(6):
        _add(store, _trial(cid, i, "none" if i % 2 else "all", 100.0 - 20 * (i % 2 == 0) + i))
    store.finish_campaign(cid, "done", {
        "status": "inconclusive", "culprits": [], "good": "none", "bad": "all", "min_effect": 0.02,
        "regression": {"ratio": 0.76, "ci_low": 0.67, "ci_high": 0.86},
        "candidates": [["mla-gather-cast", 0.97], ["oea-topk", 0.2]],
        "plan": {"cv_good": 0.012, "cv_bad": 0.234, "min_effect": 0.02, "trials_per_arm": 1099},
        "resume_with": [{"option": "--max-trials", "more_than": 6}]})
    rep = build_report(store, cid)
    assert rep.status == "unknown"
    assert rep.answer.startswith("Inconclusive within the budget")
    assert "Most likely involved so far: **mla-gather-cast** (0.97)." in rep.answer and "oea-topk" not in rep.answer
    assert "(CV 23%) needs about 1099 trials per arm to resolve 2%" in rep.answer
    assert rep.answer.endswith(f"the same command with `--resume {cid} --max-trials N` (N > 6).")
    store.close()


def test_report_computes_holm_as_run_does_when_nothing_was_stored():
    """A campaign that stored no comparisons has them computed from its trials, decided as `run`
    decides them: a 4% difference significant on its own (p 0.04) but not among three comparisons
    reads "unknown", with its Holm-adjusted p-value."""
    from bisect_lab.report.run import comparison_blocks, computed_comparisons
    rng = np.random.default_rng(0)
    vals = {a: list(1000 * np.exp(rng.normal(m, 0.03, 5))) for a, m in (("a", 0), ("b", -0.045), ("c", 0), ("d", 0))}
    (rows,) = computed_comparisons([("tok", vals, True)], ["a", "b", "c", "d"], 0.02, 0.05)
    ((table, sentences),) = comparison_blocks([("tok", True, rows)], 0.02)
    row = next(r for r in table.rows if r[1] == "`b`")
    assert float(row[4]) < 0.05 <= float(row[5]), row
    assert row[6].startswith("unknown: significant alone, not after Holm's correction over 3"), row
    assert any("corrected for (Holm)" in s for s in sentences), sentences


def _stored_run(tmp_path, levels, *, status="done", n=6, doctor=None):
    """A run campaign over arms with these mean levels; its stored result is what ``run`` stores,
    then changed by ``doctor(result)`` (so that a report which recomputed would show otherwise)."""
    store = Store(tmp_path / "results")
    specs = list(levels)
    cid = store.create_campaign("run", experiment="e", experiment_name="e",
                                params={"arms": specs, "repeat": n, "seed": 0})
    rng = np.random.default_rng(3)
    for r in range(n):
        for k, a in enumerate(specs):
            _add(store, _trial(cid, r * len(specs) + k, a, levels[a] * (1 + rng.normal(0, 0.01))))
    result = _run_summary(store, cid, specs)
    if doctor:
        doctor(result)
    store.finish_campaign(cid, status, result)
    return store, cid


def test_run_report_shows_the_stored_comparison_not_a_recomputed_one(tmp_path):
    """The trials say `all` is ~20% slower; the stored result (doctored) says -50.0% with its own
    interval, p-values and arm median: the report shows the stored numbers."""
    def doctor(res):
        res["comparisons"][0].update(ratio=0.5, ci_low=0.45, ci_high=0.55, p_value=0.0123, p_adjusted=0.0456)
        res["arms"][0].update(median=123.45)
    store, cid = _stored_run(tmp_path, {"none": 100.0, "all": 80.0}, doctor=doctor)
    md = to_markdown(build_report(store, cid))
    assert "`all` is **50.0% slower** than `none` (95% CI 45.0% .. 55.0% slower): a regression." in md
    assert "| `none` | `all` | -50.0% | -55.0% .. -45.0% | 0.012 | 0.046 | **worse** (significant) |" in md
    assert "| `none` | 6 | 123.45 |" in md
    assert "-20." not in md.split("## Arms")[1].split("## Every trial")[0]
    assert "computed by this report" not in md
    store.close()


def test_run_report_status_is_the_stored_verdict(tmp_path):
    """The colour follows the stored verdict fields: trials that differ by 20% but a stored
    "same" verdict read green; identical trials with a stored regression read red."""
    def same(res):
        res["comparisons"][0].update(verdict="same", regression=False)
    store, cid = _stored_run(tmp_path, {"none": 100.0, "all": 80.0}, doctor=same)
    rep = build_report(store, cid)
    assert rep.status == "good" and "`all` and `none` perform the same within ±2%" in rep.answer
    store.close()

    def regression(res):
        res["comparisons"][0].update(ratio=0.9, ci_low=0.88, ci_high=0.92, verdict="different", regression=True)
    store, cid = _stored_run(tmp_path / "2", {"none": 100.0, "all": 100.0}, doctor=regression)
    rep = build_report(store, cid)
    assert rep.status == "bad" and "`all` is **10.0% slower** than `none`" in rep.answer
    store.close()

    def downgraded(res):        # significant alone, not after Holm: undecided, not green
        res["comparisons"][0].update(verdict="unknown", regression=False, unadjusted_verdict="different")
    store, cid = _stored_run(tmp_path / "3", {"none": 100.0, "all": 80.0}, doctor=downgraded)
    rep = build_report(store, cid)
    assert rep.status == "unknown" and "not significant once the 1 comparisons are corrected for" in rep.answer
    store.close()


def test_run_report_shows_every_stored_pair_with_the_runs_holm_family(tmp_path):
    """Three arms: the report shows the three comparisons `run` made and stored, with the p-values
    Holm-adjusted over those three (the report used to compare the first arm with each other arm
    and adjust over its own two)."""
    store, cid = _stored_run(tmp_path, {"none": 100.0, "all": 80.0, "x": 100.0})
    res = store.campaign(cid).result
    md = to_markdown(build_report(store, cid))
    for r in res["comparisons"]:
        assert f"| `{r['a']}` | `{r['b']}` | " in md and f"| {r['p_adjusted']:.2g} |" in md
    assert "| `all` | `x` | " in md
    store.close()


def test_interrupted_run_says_its_numbers_were_computed_by_the_report(tmp_path):
    store = Store(tmp_path / "results")
    cid = store.create_campaign("run", experiment="e", experiment_name="e", params={"arms": ["none", "all"]})
    for i in range(8):
        _add(store, _trial(cid, i, "none" if i % 2 else "all", 100.0 if i % 2 else 80.0 + i * 0.1))
    rep = build_report(store, cid)       # never finished: no stored result
    md = to_markdown(rep)
    assert f"This campaign stored no comparisons (status {store.campaign(cid).status})" in md
    assert "computed by this report from its 8 stored trials" in md
    assert rep.status == "bad" and "a regression" in rep.answer
    store.close()


def test_bisect_report_status_and_effect_are_the_stored_results(tmp_path):
    """A bisection stores ``effect`` as {"ratio", "ci_low", "ci_high"}; the answer shows it, and
    the colour follows the stored ``status`` ("gradual": red) whatever the trials look like."""
    store = Store(tmp_path / "results")
    shas = [f"{i:02d}" + "d" * 38 for i in range(5)]
    cid = store.create_campaign("bisect", experiment="e", experiment_name="e",
                                params={"good": shas[0], "bad": shas[4], "arm": "none"})
    for i in range(6):
        _add(store, _trial(cid, i, "none", 100.0, commit=shas[4 * (i % 2)]))     # no difference at all
    store.finish_campaign(cid, "done", {"status": "gradual", "range": shas[1:], "good": shas[0], "bad": shas[4],
                                        "effect": {"ratio": 0.85, "ci_low": 0.8, "ci_high": 0.9},
                                        "metric": "output_throughput", "commits": shas, "n": 5})
    rep = build_report(store, cid)
    assert rep.status == "bad"
    assert rep.answer.startswith(f"A gradual change spread over 4 commits, `{shas[1][:10]}` .. `{shas[4][:10]}`")
    assert "total effect -15.0% (-20.0% .. -10.0%)" in rep.answer
    store.close()


def test_run_report_says_same_within_the_margin_the_run_used(tmp_path):
    """`run` stores the margin of its "same" verdicts (min_effect): the report quotes that one,
    not a default 2%."""
    def same_at_5(res):
        res["comparisons"][0].update(verdict="same", regression=False)
        res["min_effect"] = 0.05
    store, cid = _stored_run(tmp_path, {"none": 100.0, "all": 99.0}, doctor=same_at_5)
    rep = build_report(store, cid)
    assert "perform the same within ±5%" in rep.answer, rep.answer
    store.close()
