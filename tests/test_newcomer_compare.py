"""`bisect-lab compare "cmd A" "cmd B"` end to end, through the real CLI in a subprocess."""
import json
import os
import sqlite3
import subprocess
import sys


def cli(*args, cwd, env=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "bisect_lab", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=cwd)


def one_line_error(p, code):
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    errors = [l for l in p.stderr.splitlines() if l.startswith("bisect-lab: error:")]
    assert len(errors) == 1, p.stderr
    return errors[0]


def test_compare_wall_time_finds_the_slower_command_and_stores_a_campaign(tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "BISECT_LAB_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    env.pop("BISECT_LAB_RESULTS", None)
    p = cli("compare", "sleep 0.05", "sleep 0.15", "--repeat", "3", "--warmup", "1", "--json", cwd=here, env=env)
    assert p.returncode == 0, p.stderr
    assert list(here.iterdir()) == [], "compare created files in the current folder"
    res = json.loads(p.stdout)
    assert res["metric"] == "wall_s" and res["higher_is_better"] is False
    assert res["commands"] == ["sleep 0.05", "sleep 0.15"]
    a, b = res["arms"]
    assert 0.04 < a["median"] < 0.12 and 0.14 < b["median"] < 0.25, res["arms"]
    (c,) = res["comparisons"]
    assert c["verdict"] == "different" and c["regression"] is True and c["ratio"] > 1.5, c
    results = tmp_path / "data" / "bisect-lab" / "results" / "compare"
    with sqlite3.connect(results / "bisect-lab.sqlite") as db:
        kind, params = db.execute("SELECT kind, params FROM campaigns WHERE id=?", (res["campaign"],)).fetchone()
        tags = [t for (t,) in db.execute("SELECT tag FROM trials WHERE campaign=?", (res["campaign"],))]
    assert kind == "compare" and json.loads(params)["commands"] == ["sleep 0.05", "sleep 0.15"]
    assert len(tags) == 8 and tags.count("warmup") == 2, tags     # (1 warmup + 3) per command
    r = cli("--results", results, "report", res["campaign"], "--out", tmp_path / "rep.md", cwd=here, env=env)
    assert r.returncode == 0, r.stderr
    assert "sleep 0.15" in (tmp_path / "rep.md").read_text()


def test_compare_regex_metric_runs_in_cwd_and_reads_the_number(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "score.txt").write_text("40\n")
    p = cli("--results", tmp_path / "res", "--cache", tmp_path / "cache", "compare",
            "echo score $(cat score.txt)", "echo score $(( $(cat score.txt) * 2 ))", "--metric", r"score (\d+)",
            "--higher-is-better", "--repeat", "3", "--warmup", "0", "--cwd", work, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    assert "A: echo score $(cat score.txt)" in p.stdout
    # B reads 80 where A reads 40: twice as good when higher is better
    assert "B reads 100.0% higher than A: B is better" in out, p.stdout
    assert "could not be checked" not in out


def test_compare_bad_input_is_one_line(tmp_path):
    base = ["--results", tmp_path / "res", "--cache", tmp_path / "cache", "compare"]
    assert "both commands are" in one_line_error(cli(*base, "true", "true", cwd=tmp_path), 2)
    assert "exactly one group" in one_line_error(cli(*base, "true", "false", "--metric", "x", cwd=tmp_path), 2)
    assert "no such folder" in one_line_error(cli(*base, "true", ":", "--cwd", tmp_path / "nope", cwd=tmp_path), 2)
    # a command that always fails measures nothing: exit 4, as for every campaign
    p = cli(*base, "exit 3", "false", "--repeat", "2", "--warmup", "0", cwd=tmp_path)
    assert p.returncode == 4, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
