"""Issue 24, items 7 and 8, through the CLI in real subprocesses: --json where the README promises
it (report, cache show after the action, gpu status only when asked), reports named after the
campaign, `bisect-lab log`, tables not wrapped at 80 columns when piped, `capture --range` one
patch per commit, and a patch that does not apply naming its hunk."""
import json
import re
from pathlib import Path

from gitrepos import GitRepo, PatchSpec, git, write_patchset
from test_cli_run import cli
from toyexp import make_toy

NARROW = {"COLUMNS": ""}            # what a pipe gives rich: no width from the environment


def test_reports_log_and_json_of_report_cache_and_gpu(tmp_path):
    exp = make_toy(tmp_path)
    cids = []
    for _ in range(2):
        p = cli(tmp_path, "run", exp, "--patches", "all", "--patches", "none", "--repeat", "1", "--json")
        assert p.returncode == 0, p.stderr
        cids.append(json.loads(p.stdout)["campaign"])
    # `report latest` is written under the campaign's own id, and --json carries the stored result
    r = cli(tmp_path, "report", "latest", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["campaign"] == cids[1] and rep["kind"] == "run" and rep["status"] == "done"
    assert Path(rep["report"]).name == f"{cids[1]}.md" and Path(rep["report"]).is_file()
    assert rep["result"]["campaign"] == cids[1] and rep["result"]["comparisons"]
    # `log`: newest first, with kind, status, answer, trials; a wide table when piped
    lg = json.loads(cli(tmp_path, "log", "--json").stdout)
    assert [c["id"] for c in lg] == cids[::-1]
    assert all(c["kind"] == "run" and c["status"] == "done" and c["trials"] == 2 and ("vs" in c["answer"] or " than " in c["answer"]) for c in lg)
    human = cli(tmp_path, "log", env=NARROW)
    assert human.returncode == 0, human.stderr
    rows = [l for l in human.stdout.splitlines() if cids[0] in l]
    assert len(rows) == 1 and "done" in rows[0] and re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", rows[0]), human.stdout
    assert max(map(len, human.stdout.splitlines())) > 80
    # cache show --json after the action as well as before it; prune's --json before the action
    for args in (["cache", "show", "--json"], ["cache", "--json", "show"], ["cache", "--json"]):
        c = cli(tmp_path, *args)
        assert c.returncode == 0 and "trees" in json.loads(c.stdout), (args, c.stderr)
    assert isinstance(json.loads(cli(tmp_path, "cache", "--json", "prune").stdout), list)
    # gpu status: people's text by default, JSON only when asked
    g = cli(tmp_path, "gpu", "status")
    assert g.returncode == 0 and g.stdout.startswith("local: "), g.stdout
    assert not g.stdout.lstrip().startswith("{")
    assert "gpus" in json.loads(cli(tmp_path, "gpu", "status", "--json").stdout)["local"]


def test_capture_range_gives_one_patch_per_commit(tmp_path):
    repo = GitRepo.init(tmp_path / "src")
    repo.commit("base", {"a.py": "A = 0\n", "b.py": "B = 0\n"})
    start = repo.head()
    repo.commit("Speed up the A path", {"a.py": "A = 1\n"})
    repo.commit("Tune B", {"b.py": "B = 1\n", "c.py": "C = 1\n"})
    repo.commit("A again", {"a.py": "A = 2\n"})
    p = cli(tmp_path, "patches", "capture", "--repo", repo.path, "--out", tmp_path / "ps", "--range", f"{start}..main",
            "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["patches"] == ["speed-up-the-a-path", "tune-b", "a-again"]
    listed = {x["name"]: x for x in json.loads(cli(tmp_path, "patches", "list", _exp(tmp_path, repo, start),
                                                   "--json").stdout)}
    assert set(listed["tune-b"]["files"]) == {"b.py", "c.py"} and listed["a-again"]["requires"] == ["speed-up-the-a-path"]
    assert listed["tune-b"]["requires"] == []
    text = (tmp_path / "ps" / "a-again.patch").read_text()
    assert text.startswith("From ") and "Subject: [PATCH 3/3] A again" in text
    # together they rebuild the range's tip; every subset that keeps the requirements applies
    c = cli(tmp_path, "patches", "check", _exp(tmp_path, repo, start), "--json")
    assert c.returncode == 0 and json.loads(c.stdout)["ok"], c.stdout + c.stderr
    # the per-file split stays as an option
    f = cli(tmp_path, "patches", "capture", "--repo", repo.path, "--out", tmp_path / "pf", "--range", f"{start}..main",
            "--split", "files", "--json")
    assert f.returncode == 0 and sorted(json.loads(f.stdout)["patches"]) == ["a", "b", "c"], f.stderr


def _exp(tmp_path, repo, ref, patches="ps") -> Path:
    exp = tmp_path / f"{patches}.toml"
    exp.write_text(f'[target]\nrepo = {str(repo.path)!r}\nref = {ref!r}\npatches = {patches!r}\n'
                   '[benchmark]\ncommand = "true"\nparser = "sglang-bench-serving"\nmetric = "output_throughput"\n'
                   '[gpu]\nenabled = false\n')
    return exp


def test_a_patch_that_does_not_apply_names_its_hunk(tmp_path):
    repo = GitRepo.init(tmp_path / "src")
    lines = [f"line {i}\n" for i in range(1, 31)]
    repo.commit("base", {"f.txt": "".join(lines)})
    edited = list(lines)
    edited[1] = "line 2 patched\n"
    edited[24] = "line 25 patched\n"
    patch = repo.patch({"f.txt": "".join(edited)})           # two hunks, against `old`
    moved = list(lines)
    moved[24] = "line 25 changed upstream\n"
    repo.commit("upstream", {"f.txt": "".join(moved)})        # the second hunk no longer applies
    write_patchset(tmp_path / "bad", [PatchSpec("tweak", patch)])
    p = cli(tmp_path, "patches", "check", _exp(tmp_path, repo, "main", "bad"))
    assert p.returncode == 2, p.stderr
    err = [l for l in p.stderr.splitlines() if l.startswith("bisect-lab: error:")]
    assert len(err) == 1 and "f.txt" in err[0], p.stderr
    hunk = re.search(r"hunk #(\d+) \(line (\d+) of the patch\): (@@ [^@]+ @@)", err[0])
    assert hunk and hunk[1] == "2", err[0]
    patch_lines = (tmp_path / "bad" / "tweak.patch").read_text().splitlines()
    assert patch_lines[int(hunk[2]) - 1].startswith(hunk[3])
    assert git(repo.path, "status", "--porcelain") == ""      # the checkout untouched


def test_run_order_plot_colours_every_arm_of_an_attribution_with_a_legend():
    """An attribution measures many combinations: their run-order plot used to turn grey with no
    legend past 12 arms. Read back from the PNG: each arm's colour is there."""
    import io

    import matplotlib.image
    from bisect_lab import report_plots
    arms = ["none", "all"] + [f"only f{k}" for k in range(16)]
    points = [(i, arms[i % len(arms)], 100.0 + (i % len(arms))) for i in range(4 * len(arms))]
    colours = report_plots.arm_colours(arms)
    assert len(set(colours.values())) == len(arms) and None not in colours.values()
    png = matplotlib.image.imread(io.BytesIO(report_plots.run_order(points, "tok/s", arms)), format="png")
    import numpy as np
    from matplotlib.colors import to_rgb
    pixels = png[..., :3].reshape(-1, 3)

    def drawn(colour):          # a marker drawn at alpha 0.85 on white
        want = 0.85 * np.array(to_rgb(colour)) + 0.15
        return bool((np.abs(pixels - want).max(axis=1) < 0.02).any())

    assert all(drawn(c) for c in colours.values()), [a for a, c in colours.items() if not drawn(c)]
    many = arms + [f"only g{k}" for k in range(10)]
    counted = report_plots.arm_colours(many, {"none": 9, "all": 9})
    assert counted["none"] and counted["all"] and list(counted.values()).count(None) == len(many) - 19
