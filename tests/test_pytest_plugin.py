"""The pytest plugin, through pytester: options, markers, matrices, statistical assertions, real
trials of a toy target (real git repo, real benchmark processes, real SQLite store)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "perf"))
from toytarget import Toy  # noqa: E402

# In-process pytester restores sys.modules after each inner run; numpy and friends cannot be
# imported twice in one process, so the heavy modules the fixtures load are imported here first.
import bisect_lab.campaigns  # noqa: E402,F401
import bisect_lab.stats  # noqa: E402,F401
import bisect_lab.store  # noqa: E402,F401
import pandas  # noqa: E402,F401

pytest_plugins = ["pytester"]


def _run(pytester, *args):
    # hypothesis' plugin (when installed) costs seconds per inner session and is not needed here
    return pytester.runpytest("-p", "no:hypothesispytest", *args)

ROOT = Path(__file__).resolve().parents[1]


def test_import_is_cheap():
    code = ("import sys, bisect_lab.pytest_plugin as p; "
            "heavy = [m for m in ('pandas', 'scipy', 'numpy', 'matplotlib', 'fabric', 'git', 'sqlite3', "
            "'bisect_lab.store', 'bisect_lab.campaigns', 'bisect_lab.runner') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


ENTRY_POINT_TESTS = """
    import sys
    from pathlib import Path
    import pytest
    from bisect_lab.pytest_plugin import Options, PerfComparison
    from bisect_lab.pytest_plugin.options import OPTIONS

    def test_loaded_from_the_entry_point(request):
        plugin = request.config.pluginmanager.get_plugin("bisect_lab")
        assert plugin is sys.modules["bisect_lab.pytest_plugin"]
        assert Path(plugin.__file__).resolve().is_relative_to(Path(ROOT))
        assert isinstance(request.config.stash[OPTIONS], Options)

    @pytest.mark.bisect_lab(repeat=3, max_repeat=4, max_regression=0.3, unknown="skip")
    def test_marker_against_options(bisect_lab):
        assert bisect_lab.repeat() == 7 and bisect_lab.max_repeat() == 9     # the options win
        assert bisect_lab.max_regression == 0.3 and bisect_lab.unknown == "skip"    # the marker wins

    def test_options_without_a_marker(bisect_lab):
        assert bisect_lab.max_regression == 0.5 and bisect_lab.unknown == "xfail"
        assert isinstance(bisect_lab.compare([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]), PerfComparison)
"""


def test_plugin_loads_from_the_pyproject_entry_point(tmp_path):
    """A fresh pytest process finds the plugin only through the ``pytest11`` entry point that
    pyproject.toml declares (a dist-info written from it), whether or not bisect-lab is installed."""
    import tomllib
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    dist = tmp_path / "site" / "bisect_lab-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bisect-lab\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()))
    (tmp_path / "test_ep.py").write_text(f"ROOT = {str(ROOT)!r}\n" + textwrap.dedent(ENTRY_POINT_TESTS))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), str(ROOT)])

    def run(*args):
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-p", "no:hypothesispytest", "test_ep.py", *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    r = run("--bisect-lab-repeat=7", "--bisect-lab-max-repeat=9", "--bisect-lab-max-regression=0.5",
            "--bisect-lab-unknown=xfail")
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout + r.stderr
    r = run("--bisect-lab-skip")
    assert r.returncode == 0 and "1 passed, 2 skipped" in r.stdout, r.stdout + r.stderr


def test_plugin_is_registered_with_its_option_group(pytester):
    res = _run(pytester, "--help")
    res.stdout.fnmatch_lines(["*bisect-lab performance experiments*", "*--bisect-lab-results*",
                              "*--bisect-lab-experiment*", "*--bisect-lab-repeat*", "*--bisect-lab-unknown*"])
    res = _run(pytester, "--markers")
    res.stdout.fnmatch_lines(["*@pytest.mark.bisect_lab(experiment=None, repeat=None, unknown=None*"])


def test_matrix_ids_are_readable(pytester):
    pytester.makepyfile(textwrap.dedent("""
        import pytest
        from bisect_lab.matrix import params
        @pytest.mark.parametrize("arm", params(["topk", "mla"], env={"NCCL_PROTO": ["LL", "Simple", None]}))
        def test_arm(arm):
            assert arm.split()[0] in ("all", "all-minus")
    """))
    res = _run(pytester, "--collect-only", "-q")
    res.stdout.fnmatch_lines(["*test_arm[[]all-NCCL_PROTO=LL[]]", "*test_arm[[]all-minus-topk-NCCL_PROTO=LL[]]",
                              "*test_arm[[]all-minus-mla-NCCL_PROTO=unset[]]"])
    assert "9 tests collected" in res.stdout.str()


def test_matrix_validates_against_a_patch_set(tmp_path):
    from bisect_lab.errors import UsageError
    from bisect_lab.matrix import expand
    toy = Toy(tmp_path / "t", patches={"slow": 0.75, "noop": 1.0, "other": 1.0})
    cases = expand(toy.experiment, patches=["all", "slow", "only noop,other"], env={"TOY_CV": ["0.01"]})
    assert [c.spec for c in cases] == ["all TOY_CV=0.01", "all-minus slow TOY_CV=0.01"]
    assert [c.id for c in cases] == ["all-TOY_CV=0.01", "all-minus-slow-TOY_CV=0.01"]   # "only noop,other" == all-minus slow
    assert [c.spec for c in expand(toy.experiment)] == ["all", "all-minus slow", "all-minus noop", "all-minus other"]
    with pytest.raises(UsageError, match="slw"):
        expand(toy.experiment, patches=["all-minus slw"])
    with pytest.raises(UsageError, match="unknown patch 'slw'"):
        expand(["slow", "noop"], patches=["slw"])


UNKNOWN_TESTS = """
    import pytest

    # numbers measured elsewhere: nothing runs, only the statistics and the outcome policy
    NOISY_A = [100, 80, 120]
    NOISY_B = [95, 125, 78]

    def test_undecided_default(bisect_lab):
        bisect_lab.compare(NOISY_A, NOISY_B).assert_not_slower(0.02)

    @pytest.mark.bisect_lab(unknown="skip")
    def test_undecided_skip(bisect_lab):
        bisect_lab.compare(NOISY_A, NOISY_B).assert_not_slower(0.02)

    @pytest.mark.bisect_lab(unknown="xfail")
    def test_undecided_xfail(bisect_lab):
        bisect_lab.compare(NOISY_A, NOISY_B).assert_not_slower(0.02)

    def test_clear_regression(bisect_lab):
        bisect_lab.compare([100, 101, 99, 100], [80, 81, 79, 80]).assert_not_slower(0.02)

    def test_clear_pass(bisect_lab):
        c = bisect_lab.compare([100, 101, 99, 100], [100.5, 99.5, 100, 101])
        c.assert_not_slower(0.02)
        c.assert_not_slower()           # the default threshold, 2%

    def test_small_significant_slowdown_within_threshold(bisect_lab):
        # 1% slower, clearly (tight data), but inside the 5% allowance: passes
        bisect_lab.compare([100.0, 100.1, 99.9, 100.0], [99.0, 99.1, 98.9, 99.0]).assert_not_slower(0.05)
"""


def test_unknown_outcome_is_configurable(pytester):
    pytester.makepyfile(UNKNOWN_TESTS)
    res = _run(pytester, "-rsxf")
    res.assert_outcomes(passed=2, failed=2, skipped=1, xfailed=1)
    res.stdout.fnmatch_lines(["*_ test_undecided_default _*",
                              "bisect-lab could not decide: 'b' is 1.2% slower than 'a'*straddles the allowed 2.0%*",
                              "*_ test_clear_regression _*",
                              "performance regression: 'b' is 20.0% slower than 'a' (value: 95% CI 1*% slower, p=*"])
    # the command-line default applies where the marker says nothing
    res = _run(pytester, "--bisect-lab-unknown=skip", "-k", "undecided_default")
    res.assert_outcomes(skipped=1)
    pytester.makeini("[pytest]\nbisect_lab_unknown = xfail\n")
    res = _run(pytester, "-k", "undecided_default")
    res.assert_outcomes(xfailed=1)


def test_runs_arms_of_a_real_experiment_and_fails_on_the_planted_regression(pytester, tmp_path):
    toy = Toy(tmp_path / "toy", patches={"slow": 0.75, "noop": 1.0}, cv=0.01, repeat=3)
    results = tmp_path / "results"
    pytester.makepyfile(textwrap.dedent(f"""
        import pytest
        from bisect_lab.matrix import params

        pytestmark = pytest.mark.bisect_lab(experiment={str(toy.experiment)!r}, repeat=3)

        @pytest.mark.parametrize("arm", params({str(toy.experiment)!r}, patches=["all", "slow"]))
        def test_not_slower_than_baseline(bisect_lab, arm):
            c = bisect_lab.compare("none", arm)
            c.assert_not_slower(max_regression=0.05)

        def test_noop_alone_is_free(bisect_lab):
            res = bisect_lab.run(["none", "only noop"])
            assert len(res.values("none")) == 3
            bisect_lab.compare("none", "only noop").assert_not_slower(0.05)

        def test_slow_path_still_detected(bisect_lab):
            bisect_lab.compare("none", "only slow").assert_slower(0.1)

        @pytest.mark.bisect_lab(repeat=2, max_repeat=6)
        def test_undecided_measures_more_rounds(bisect_lab):
            c = bisect_lab.compare("none", "only noop")
            assert c.rounds == 1 and len(c.a_values) == 2
            c.assert_not_slower(0.05)           # two trials cannot show < 5% at alpha / 3: more rounds
            assert c.rounds > 1 and len(c.b_values) == 2 * c.rounds
    """))
    res = _run(pytester, "-v", f"--bisect-lab-results={results}", f"--bisect-lab-cache={tmp_path / 'cache'}")
    res.assert_outcomes(passed=4, failed=1)
    out = res.stdout.str()
    # the matrix: "all-minus slow" (= only noop) passes, "all" (with the slow patch) fails
    res.stdout.fnmatch_lines(["*test_not_slower_than_baseline[[]all[]] FAILED*",
                              "*test_not_slower_than_baseline[[]all-minus-slow[]] PASSED*",
                              "*performance regression: 'all' is 2?.?% slower than 'none'*allowed: 5.0%*",
                              "*bisect-lab*", "*campaign(s) stored in*"])
    assert "Traceback" not in out
    # results went into the same store as the CLI's, tagged with the node ids
    from bisect_lab import load
    df = load(results).trials()
    tags = set(df["tag"])
    assert "test_runs_arms_of_a_real_experiment_and_fails_on_the_planted_regression.py::test_noop_alone_is_free" in tags
    assert any(t.endswith("test_not_slower_than_baseline[all]") for t in tags)
    assert set(df["status"]) == {"ok"} and len(df) > 3 * 2 * 4 + 2 * 2
    camps = load(results).campaigns()
    assert set(camps["kind"]) == {"pytest"} and set(camps["status"]) == {"done"}
    # every round of the sequential test is its own campaign, all tagged with the same node id
    node = [t for t in tags if t.endswith("test_undecided_measures_more_rounds")]
    assert len(node) == 1 and (df["tag"] == node[0]).sum() >= 8


def test_bad_arm_spec_fails_the_test_with_one_clear_line(pytester, tmp_path):
    toy = Toy(tmp_path / "toy")
    pytester.makepyfile(textwrap.dedent(f"""
        import pytest
        @pytest.mark.bisect_lab(experiment={str(toy.experiment)!r})
        def test_typo(bisect_lab):
            bisect_lab.compare("none", "all-minus slw")
        def test_no_experiment(bisect_lab):
            bisect_lab.compare("none", "all")
    """))
    res = _run(pytester, f"--bisect-lab-results={tmp_path / 'r'}", f"--bisect-lab-cache={tmp_path / 'c'}")
    res.assert_outcomes(failed=2)
    res.stdout.fnmatch_lines(["*bisect-lab: unknown patch*slw*", "*bisect-lab: no experiment file*"])
    assert "Traceback" not in res.stdout.str()


def test_skip_option_skips_bisect_lab_tests(pytester):
    pytester.makepyfile(UNKNOWN_TESTS)
    res = _run(pytester, "--bisect-lab-skip")
    res.assert_outcomes(skipped=6)


DEMO = ROOT / "experiments" / "demo.toml"


@pytest.mark.slow
@pytest.mark.skipif(not DEMO.exists(), reason="the bundled demo is not in this checkout")
def test_demo_sample_module_fails_on_the_planted_regression(pytester, tmp_path, monkeypatch):
    """tests/perf/test_demo_perf.py, pointed at the demo's planted regression (mla-gather-cast)."""
    # another basename: tests/perf/test_demo_perf.py may already be imported in this process
    pytester.makepyfile(test_demo_perf_planted=(ROOT / "tests" / "perf" / "test_demo_perf.py").read_text())
    monkeypatch.setenv("BISECT_LAB_DEMO_EXPERIMENT", str(DEMO))
    monkeypatch.setenv("DEMO_PERF_ARMS", "only mla")
    # A loaded machine can make the demo too noisy to decide within 6 trials per arm: that outcome is
    # an xfail ("could not decide"), never a pass. Quiet machines (CI) decide: a failure.
    monkeypatch.setenv("DEMO_PERF_UNKNOWN", "xfail")
    res = _run(pytester, "-v", "-rxX", f"--bisect-lab-results={tmp_path / 'r'}", f"--bisect-lab-cache={tmp_path / 'c'}")
    outcomes = res.parseoutcomes()
    assert not outcomes.get("passed"), res.stdout.str()
    if outcomes.get("xfailed"):
        res.stdout.fnmatch_lines(["*bisect-lab could not decide: 'only mla-gather-cast' is*"])
        return
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*test_not_slower_than_baseline[[]only-mla-gather-cast[]] FAILED*",
                              "performance regression: 'only mla-gather-cast' is * slower than 'none'*allowed: 10.0%*"])
