"""Results follow the experiment, not the current folder, and the bundled demo is never a silent
default (issue 24, items 3 and 4), through the CLI in real subprocesses."""
import json
import os
import subprocess
import sys
import textwrap

from toyexp import make_toy


def _env(tmp_path):
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    env.pop("BISECT_LAB_RESULTS", None)
    env.pop("COLUMNS", None)
    return env


def _cli(tmp_path, *args, cwd):
    return subprocess.run([sys.executable, "-m", "bisect_lab", "--cache", str(tmp_path / "cache"), *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=180, env=_env(tmp_path))


def test_history_is_the_same_from_every_folder(tmp_path):
    exp = make_toy(tmp_path / "proj")
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    p = _cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1", "--json", cwd=here)
    assert p.returncode == 0, p.stderr
    cid = json.loads(p.stdout)["campaign"]
    said = [l for l in p.stderr.splitlines() if l.startswith("results: ")]
    assert said == [f"results: {tmp_path / 'proj' / 'results'} (default: beside the experiment; --results to change)"]
    assert not (here / "results").exists()
    # from another folder: the same history (planning sees the earlier trials), and `log` finds it
    # (`report latest` from another folder: test_cli_inputs.py)
    q = _cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1", cwd=there)
    assert q.returncode == 0 and "planning: no earlier measurements" not in q.stderr, q.stderr
    assert not (there / "results").exists()
    lg = _cli(tmp_path, "log", "--json", cwd=there)
    assert lg.returncode == 0, lg.stderr
    assert [c["id"] for c in json.loads(lg.stdout)][1] == cid
    # --resume CAMPAIGN alone, from a third folder: the same campaign goes on
    more = _cli(tmp_path, "run", "--resume", cid, "--repeat", "2", "--json", cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    assert json.loads(more.stdout)["campaign"] == cid


def test_pytest_marker_path_and_results_follow_the_test_file(tmp_path):
    exp = make_toy(tmp_path / "proj")
    tests = tmp_path / "proj" / "perf"
    tests.mkdir()
    (tests / "test_perf.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.bisect_lab(experiment="../toy.toml", repeat=2)
        def test_noop_is_free(bisect_lab):
            bisect_lab.compare("none", "only noop").assert_not_slower(0.5)
    """))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                        f"--rootdir={elsewhere}", f"--bisect-lab-cache={tmp_path / 'cache'}", str(tests / "test_perf.py")],
                       cwd=elsewhere, capture_output=True, text=True, timeout=180, env=_env(tmp_path))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert (exp.parent / "results" / "bisect-lab.sqlite").is_file(), p.stdout[-2000:]
    assert not (elsewhere / "results").exists()


def test_the_bundled_demo_is_said_and_its_names_are_called_the_demos(tmp_path):
    p = _cli(tmp_path, "run", "--patches", "only no-such-patch", cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "no EXPERIMENT given: using the bundled demo" in p.stderr
    err = [l for l in p.stderr.splitlines() if l.startswith("bisect-lab: error:")]
    assert len(err) == 1 and "valid names" in err[0] and "the bundled demo's names" in err[0], p.stderr
    assert not (tmp_path / "results").exists()
    # an experiment given: no demo line
    exp = make_toy(tmp_path / "proj")
    q = _cli(tmp_path, "run", exp, "--patches", "only no-such-patch", cwd=tmp_path)
    assert q.returncode == 2 and "bundled demo" not in q.stderr, q.stderr
