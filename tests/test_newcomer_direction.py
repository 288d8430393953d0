"""Direction and reference, through the real CLI (issue 24, items 5 and 9): a bisection looking for
a speedup of a lower-is-better metric, in its own terms, and its report in the experiment's
direction; `run`'s baseline and no implicit `all`; `--seed`; a format-patch signature line."""
import json
import re
import sqlite3
import textwrap

from gitrepos import GitRepo, PatchSpec, git, write_patchset
from test_cli_run import cli
from toyexp import make_toy

# A latency-like metric (lower is better); commit 6 makes it 25% smaller: a speedup.
BENCH = textwrap.dedent('''
    import os, random
    here = os.path.dirname(os.path.abspath(__file__))
    ms = float(open(os.path.join(here, "ms.txt")).read())
    print(f"Median latency (ms): {ms * random.gauss(1.0, 0.01):.3f}")
''')


def params_of(tmp_path, cid) -> dict:
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        (params,) = db.execute("SELECT params FROM campaigns WHERE id=?", (cid,)).fetchone()
    return json.loads(params)


def speedup_history(root, n=8, culprit=6):
    repo = GitRepo.init(root / "target")
    repo.commit("base", {"bench.py": BENCH, "ms.txt": "40.0\n", "log.txt": "0\n"})
    good = repo.head()
    shas = {}
    for i in range(1, n + 1):
        files = {"log.txt": f"{i}\n"}
        if i == culprit:
            files["ms.txt"] = "30.0\n"
        repo.commit(f"commit {i}", files)
        shas[i] = repo.head()
    write_patchset(root / "patches", [PatchSpec("noop", repo.patch({"extra.txt": "1\n"}, base=good))])
    exp = root / "latency.toml"
    exp.write_text(textwrap.dedent("""
        [target]
        repo = "target"
        ref = "main"
        patches = "patches"
        [benchmark]
        command = "python3 bench.py"
        timeout_s = 20
        parser = "regex"
        metric = "latency_ms"
        higher_is_better = false
        [benchmark.patterns]
        latency_ms = 'Median latency \\(ms\\): ([0-9.]+)'
        [gpu]
        enabled = false
        [design]
        seed = 3
        max_trials = 60
    """))
    return good, shas, exp


def test_bisect_for_a_speedup_in_its_own_terms_and_the_report_keeps_the_direction(tmp_path):
    good, shas, exp = speedup_history(tmp_path)
    p = cli(tmp_path, "bisect", exp, "--old", good, "--new", "main", "--look-for", "improvement",
            "--seed", "11", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = " ".join(p.stdout.split())
    # the speedup reads as a speedup: the first fast commit, faster than the slow side, never "regression"
    assert f"first fast commit: {shas[6]}" in out, out
    m = re.search(r"effect: fast is ([\d.]+)% faster than slow \(95% CI [\d.]+% \.\. [\d.]+% faster\)", out)
    assert m and 20 < float(m[1]) < 30, out                       # the planted 40 -> 30 ms
    assert "regression" not in out and "bad" not in out, out
    cid = out.split("campaign ")[1].split(")")[0]
    params = params_of(tmp_path, cid)
    # the direction, the terms and the seed given are the campaign's own
    assert params["higher_is_better"] is False and params["metric"] == "latency_ms"
    assert (params["look_for"], params["term_old"], params["term_new"], params["seed"]) == \
        ("improvement", "slow", "fast", 11)
    rep = cli(tmp_path, "report", cid, "--out", tmp_path / "rep.md")
    assert rep.returncode == 0, rep.stderr[-2000:]
    md = (tmp_path / "rep.md").read_text()
    assert "lower is better" in md and "higher is better" not in md
    assert f"First fast commit: **`{shas[6][:12]}`**" in md, md[:2000]
    assert "← first fast" in md and "(slow end)" in md


def test_run_measures_what_was_asked_and_its_baseline_in_plain_words(tmp_path):
    exp = make_toy(tmp_path, conflict=True)     # `clash` does not apply beside `slow`: `all` cannot build
    p = cli(tmp_path, "run", exp, "--patches", "all-minus clash", "--repeat", "2", "--seed", "7", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout)
    assert [a["arm"] for a in res["arms"]] == ["none", "all-minus clash"] and res["baseline"] == "none"
    (c,) = res["comparisons"]
    assert (c["a"], c["b"]) == ("none", "all-minus clash") and c["ratio"] < 0.8       # the planted 0.7
    assert params_of(tmp_path, res["campaign"])["seed"] == 7

    # --baseline names the reference; what the user typed stays beside its canonical form
    h = cli(tmp_path, "run", exp, "--patches", "only slow,noop", "--patches", "none-plus noop",
            "--baseline", "none-plus noop", "--repeat", "3", env={"COLUMNS": "200"})
    assert h.returncode == 0, h.stderr[-2000:]
    out = " ".join(h.stdout.split())
    assert "only slow,noop (= only noop,slow)" in out and "none-plus noop (= only noop)" in out, out
    assert "the baseline is none-plus noop (= only noop)" in out
    m = re.search(r"only slow,noop is ([\d.]+)% slower than none-plus noop \(95% CI ", out)
    assert m and 20 < float(m[1]) < 40, out                   # the planted 0.7
    assert "different" not in out and "improvement" not in out


def test_patches_list_counts_no_signature_line_as_a_deletion(tmp_path):
    repo = GitRepo.init(tmp_path / "target")
    repo.commit("base", {"f.txt": "a\nb\nc\n"})
    repo.commit("change", {"f.txt": "a\n-- b\nc\nd\n"})
    fp = git(repo.path, "format-patch", "-1", "--stdout") + "\n"
    assert "\n-- \n" in fp                          # git's own signature line
    numstat = git(repo.path, "diff", "--numstat", "HEAD~1", "HEAD").split()
    write_patchset(tmp_path / "patches", [PatchSpec("change", fp)])
    exp = tmp_path / "e.toml"
    exp.write_text('[target]\nrepo = "target"\nref = "main"\npatches = "patches"\n'
                   '[benchmark]\ncommand = "true"\nmetric = "x"\nparser = "regex"\n[benchmark.patterns]\n'
                   'x = "x ([0-9]+)"\n[gpu]\nenabled = false\n')
    p = cli(tmp_path, "patches", "list", exp, "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    (row,) = json.loads(p.stdout)
    assert (row["added"], row["removed"]) == (int(numstat[0]), int(numstat[1])) == (2, 1)
