"""Issue 24, what the item-by-item audit found still missing (each through the real CLI):
an attribution's arms shown as typed beside their canonical form (item 5), its planning line
saying what the difference already seen costs, not only the 2% ``min_effect`` (item 6), and an
attribution cut short before it could plan printing a sentence, not a Python dict (item 6)."""
import re

from test_cli_run import cli
from toyexp import make_toy


def test_an_attribution_shows_the_typed_arm_and_plans_from_the_difference_it_sees(tmp_path):
    exp = make_toy(tmp_path, effects={"slow": 0.5, "noop": 1.0, "gated": 1.0, "fast": 1.0})
    p = cli(tmp_path, "attribute", exp, "--good", "none", "--bad", "all-minus noop,gated,fast", "--seed", "3",
            timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = " ".join(p.stdout.split())
    assert "bad = 'all-minus noop,gated,fast' (= 'only slow')" in out, out
    assert "culprits: slow" in out, out
    # the 50% the campaign already reads is planned in its own right beside the 2% min_effect
    m = re.search(r"planning after \d+ trials \(CV good [\d.]+%, bad [\d.]+%\): so far bad ([\d.]+)% slower than "
                  r"good: about (\d+) trials per arm settle that; to resolve 2% at this noise: about \d+ trials per "
                  r"arm \(a further, smaller culprit\)", p.stderr)
    assert m and 45 <= float(m[1]) <= 55 and int(m[2]) <= 3, p.stderr[-3000:]
    # the report opens in the same words; the posterior stays in its detail
    cid = out.split("(campaign ")[1].split(")")[0]
    assert cli(tmp_path, "report", cid, "--out", tmp_path / "a.md").returncode == 0
    head = (tmp_path / "a.md").read_text().split("\n## ")[0]
    assert re.search(r"explained by \*\*slow\*\* \((>99|\d\d)% sure\)\. `only slow` is [45]\d\.\d% slower than `none` "
                     r"\(95% CI [\d.]+% \.\. [\d.]+% slower\)", head) and "posterior" not in head, head
    # progress: the arm measured, against the budget from the first line ("at most": it stops early)
    prog = [l for l in p.stderr.splitlines() if l.startswith("[")]
    assert prog and all(re.match(r"\[\d+/200 at most(, ETA at most \S+)?\] arm (none|only slow|.+) on local: ", l)
                        for l in prog), prog
    # piped, a message stays on one line however long (the planning lines are over 200 characters)
    assert all(line.startswith(("[", "planning", "results:", "preparing", "prepared", "creating", "fetching",
                                "warning", "local:")) for line in p.stderr.splitlines() if line), p.stderr


def test_an_attribution_stopped_before_it_could_plan_says_so_in_words(tmp_path):
    exp = make_toy(tmp_path, effects={"slow": 0.9, "noop": 1.0, "gated": 1.0})
    p = cli(tmp_path, "attribute", exp, "--good", "none", "--bad", "all", "--max-trials", "3", timeout=300)
    assert p.returncode == 3, p.stderr[-3000:]
    out = " ".join(p.stdout.split())
    assert "inconclusive" in out and "{" not in out and "cv_good" not in out, out
    assert "too few readings of good and bad yet to say how many trials would settle it" in out, out


def test_the_noise_warning_says_what_it_means_for_the_answer():
    """The strategies' "noisy arms ...: to resolve 2% at this noise" (a plan for min_effect, printed
    after a 35% answer) reads as what the noise hides; the JSON keeps the strategy's own text."""
    import io

    from rich.console import Console

    from bisect_lab.render import attribution_result
    res = {"status": "culprits", "culprits": ["a"], "trials": 35, "campaign": "c1", "good": "none", "bad": "all",
           "metric": "tok", "higher_is_better": True, "regression": {"ratio": 0.65, "ci_low": 0.6, "ci_high": 0.7},
           "warnings": ["stage 2 ('good plus a' vs 'bad'): noisy arms (CV good 6.0%, bad 6.4%): to resolve 2% at "
                        "this noise: about 156 trials per arm"]}
    buf = io.StringIO()
    attribution_result(res, Console(file=buf, width=300, color_system=None))
    out = " ".join(buf.getvalue().split())
    assert ("warning: stage 2 ('good plus a' vs 'bad'): noisy readings (CV good 6.0%, bad 6.4%): a difference as "
            "small as 2% would need about 156 trials per arm to be told from none") in out, out
    assert "to resolve" not in out


def test_log_says_a_run_answer_in_words_and_lists_compare_campaigns(tmp_path):
    """`log` read "all vs none -23.6% (different)": the signed ratio item 5 asked to retire."""
    import json
    exp = make_toy(tmp_path, effects={"slow": 0.5, "noop": 1.0})
    p = cli(tmp_path, "run", exp, "--patches", "none", "--patches", "all", "--repeat", "3", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    c = cli(tmp_path, "compare", "true", "sleep 0.2", "--repeat", "3", "--warmup", "0", "--json")
    assert c.returncode == 0, c.stderr[-2000:]
    lg = json.loads(cli(tmp_path, "log", "--kind", "run", "--json").stdout)
    assert len(lg) == 1 and re.fullmatch(r"all is (4\d|5\d)\.\d% slower than none", lg[0]["answer"]), lg
    comp = cli(tmp_path, "log", "--kind", "compare", "--json")
    assert comp.returncode == 0, comp.stderr
    assert [x["kind"] for x in json.loads(comp.stdout)] == ["compare"]


def test_compare_names_its_arms_by_their_commands_and_says_where_results_go_once(tmp_path):
    """hyperfine's users read "A: sleep 0.05", not the spec `none BISECT_LAB_CMD='sleep 0.05'` that
    carries it, nor an env-var table about that carrier; the interval in slower/faster words."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), BISECT_LAB_CACHE=str(tmp_path / "cache"))
    env.pop("BISECT_LAB_RESULTS", None)
    p = subprocess.run([sys.executable, "-m", "bisect_lab", "compare", "sleep 0.05", "sleep 0.3", "--repeat", "3",
                        "--warmup", "0"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    assert "BISECT_LAB_CMD" not in out and "Env vars" not in out, out
    assert "A: sleep 0.05 │" in out and "│ B: sleep 0.3 │ A: sleep 0.05 │" in out, out
    assert re.search(r"B is [\d.]+% slower than A \(wall time\); 95% CI [\d.]+% \.\. [\d.]+% slower", out), out
    assert re.search(r"B: sleep 0.3 is [\d.]+% slower than A: sleep 0.05", out), out
    said = [l for l in p.stderr.splitlines() if l.startswith("results: ")]
    assert said == [f"results: {tmp_path / 'data' / 'bisect-lab' / 'results' / 'compare'} (default of compare, "
                    "never the current folder; --results to change)"], p.stderr


def test_check_and_patches_list_are_not_wrapped_at_80_columns_when_piped(tmp_path):
    """A piped `check` or `patches list` (a log, `| grep`) broke its lines at rich's 80 columns."""
    toy = make_toy(tmp_path, bench_command="python3 bench.py --tree {tree} --a-long-option-that-makes-the-line-long")
    p = cli(tmp_path, "check", toy, "--no-probe", env={"COLUMNS": ""})
    assert p.returncode == 0, p.stderr
    assert max(map(len, p.stdout.splitlines())) > 80, p.stdout
    p = cli(tmp_path, "patches", "list", toy, "--json")
    assert p.returncode == 0, p.stderr
    line = next(l for l in cli(tmp_path, "check", toy, "--no-probe").stdout.splitlines() if "would measure" in l)
    assert re.fullmatch(r"`bisect-lab run` would measure none \(the baseline\) and all on local: 8 trials \(4 per "
                        r"arm\), metric output_throughput \(higher is better\)", line), line


def test_patches_list_reads_the_folder_capture_just_wrote(tmp_path):
    """README: capture a patch set, "then `bisect-lab patches list`": the folder itself is enough
    (it said "experiment file not found"); `check` needs the experiment and says why in one line."""
    from gitrepos import GitRepo
    repo = GitRepo.init(tmp_path / "proj")
    repo.commit("base", {"a.py": "x = 1\n", "sub/b.py": "y = 1\n"})
    (tmp_path / "proj" / "a.py").write_text("x = 2  # changed\n")     # a new size: no racy-git stat match
    (tmp_path / "proj" / "sub" / "b.py").write_text("y = 2  # changed\n")
    out = tmp_path / "patches" / "mine"
    p = cli(tmp_path, "patches", "capture", "--repo", tmp_path / "proj", "--out", out, "--split", "sub/*=sub-change")
    assert p.returncode == 0, p.stderr
    ls = cli(tmp_path, "patches", "list", out)
    assert ls.returncode == 0, ls.stderr
    assert "sub-change" in ls.stdout and "sub/b.py" in ls.stdout and "bundled demo" not in ls.stderr, ls.stdout
    ck = cli(tmp_path, "patches", "check", out)
    assert ck.returncode == 2 and "Traceback" not in ck.stderr, ck.stderr
    assert ck.stderr.strip().splitlines()[-1] == (f"bisect-lab: error: {out} is a folder: patches check takes an "
                                                   "experiment file (it names the repository and ref the patches "
                                                   "apply to)"), ck.stderr


def test_the_other_bundled_experiments_keep_their_results_out_of_the_installation(tmp_path):
    """experiments/README's `bisect-lab run experiments/demo-server.toml` wrote into the checkout's
    (or site-packages') experiments/results: every shipped experiment writes to the user data dir."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import bisect_lab
    exp = Path(bisect_lab.__file__).resolve().parent.parent / "experiments" / "demo-server.toml"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), BISECT_LAB_CACHE=str(tmp_path / "cache"))
    env.pop("BISECT_LAB_RESULTS", None)
    before = sorted((exp.parent / "results").rglob("*")) if (exp.parent / "results").exists() else None
    p = subprocess.run([sys.executable, "-m", "bisect_lab", "run", exp, "--patches", "none", "--repeat", "1",
                        "--json"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    where = tmp_path / "data" / "bisect-lab" / "results" / "demo"
    assert f"results: {where} (default for the bundled demo experiments; --results to change)" in p.stderr
    assert (where / "bisect-lab.sqlite").is_file()
    after = sorted((exp.parent / "results").rglob("*")) if (exp.parent / "results").exists() else None
    assert after == before, "a bundled experiment wrote into the installation"


def test_one_reading_per_arm_shows_no_cv_and_no_interval(tmp_path):
    """Item 6: `CV nan%` for one reading; its "95% CI 99.87 .. 99.87" was the same false precision."""
    exp = make_toy(tmp_path, effects={"slow": 0.7, "noop": 1.0})
    p = cli(tmp_path, "run", exp, "--repeat", "1", env={"COLUMNS": "200"})
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [l for l in p.stdout.splitlines() if l.startswith("│ none ") or l.startswith("│ all ")][:2]
    assert len(rows) == 2, p.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[1] == "1" and cells[4] == "-" and cells[5] == "-", row
    assert "nan" not in p.stdout


def test_no_planning_line_once_the_search_has_its_answer():
    """Item 9: a planning estimate was logged after the bisection had finished."""
    from types import SimpleNamespace

    from bisect_lab.campaigns.planning import PlanProgress
    from bisect_lab.verdicts import PlanEstimate
    lines: list[str] = []
    strategy = SimpleNamespace(trials=12, done=True, plan_estimate=lambda: PlanEstimate(0.01, 0.02, 0.02, 429))
    PlanProgress(SimpleNamespace(log=lines.append), strategy).update()
    assert lines == []
    strategy.done = False
    PlanProgress(SimpleNamespace(log=lines.append), strategy).update()
    assert lines == ["planning after 12 trials (CV good 1.0%, bad 2.0%): to resolve 2% at this noise: about 429 "
                     "trials per arm"]
