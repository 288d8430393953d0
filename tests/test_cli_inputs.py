"""Bad input and storage trouble through the real CLI (issue 19): one line on stderr, the right exit code."""
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from test_cli_run import cli, one_line_error
from toyexp import make_toy


def test_nul_byte_in_env_is_a_config_error_not_a_failed_measurement(tmp_path):
    exp = make_toy(tmp_path, extra_toml='[env]\nTOY_KNOB = "a\\u0000b"\n')
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1")
    line = one_line_error(p, 2)
    assert "[env.TOY_KNOB]" in line and "NUL" in line


def test_typo_table_is_named_with_a_suggestion(tmp_path):
    exp = make_toy(tmp_path, extra_toml="[desing]\nrepeat = 1\n")
    line = one_line_error(cli(tmp_path, "run", exp, "--repeat", "1"), 2)
    assert "unknown table [desing]" in line and "did you mean [design]?" in line


LOCKER = r'''
import os, sqlite3, sys, time
db, go, locked, release = sys.argv[1:]
while not os.path.exists(go):
    time.sleep(0.02)
c = sqlite3.connect(db, isolation_level=None, timeout=30)
c.execute("BEGIN EXCLUSIVE")
open(locked, "w").close()
while not os.path.exists(release):
    time.sleep(0.02)
c.execute("COMMIT")
'''


def test_locked_database_keeps_the_finished_trial_and_resume_stores_it(tmp_path):
    go, locked, release = tmp_path / "go", tmp_path / "locked", tmp_path / "release"
    # The benchmark starts the lock holder and waits until it holds the lock: the trial that then
    # finishes meets a database another process holds past the busy timeout.
    bench = f"touch {go} && while [ ! -e {locked} ]; do sleep 0.05; done && python3 bench.py"
    exp = make_toy(tmp_path, bench_command=bench)
    db = tmp_path / "res" / "bisect-lab.sqlite"
    (tmp_path / "locker.py").write_text(LOCKER)
    holder = subprocess.Popen([sys.executable, str(tmp_path / "locker.py"), str(db), str(go), str(locked),
                               str(release)])
    try:
        t0 = time.monotonic()
        p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1",
                env={"BISECT_LAB_BUSY_TIMEOUT_S": "0.2"})
        line = one_line_error(p, 4)
        assert time.monotonic() - t0 < 60
        assert "locked" in line and "spool" in line, line
        assert holder.poll() is None            # the lock was held the whole time
    finally:
        release.touch()
        holder.wait(timeout=30)
    spool = tmp_path / "res" / "bisect-lab.spool.jsonl"
    kept = [json.loads(l)["trial"] for l in spool.read_text().splitlines()]
    assert len(kept) == 1 and kept[0]["status"] == "ok"
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 0
    r = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1", "--resume", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["campaign"] == kept[0]["campaign"]
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT campaign, trial, started, metrics FROM trials").fetchall()
    assert [(cid, n, started) for cid, n, started, _ in rows] == [(kept[0]["campaign"], 0, kept[0]["started"])]
    assert json.loads(rows[0][3])["output_throughput"] == kept[0]["metrics"]["output_throughput"]
    assert not spool.exists()


GPU_EXP = """
[target]
repo = "repo"
[benchmark]
command = "true"
[gpu]
idle_timeout_s = 0.5
"""


@pytest.mark.parametrize("busy, code", [(False, 0), (True, 4)])
def test_gpu_reset_exit_code_says_whether_it_succeeded(tmp_path, busy, code):
    (tmp_path / "repo").mkdir()
    exp = tmp_path / "gpu.toml"
    exp.write_text(GPU_EXP)
    nvml = tmp_path / "nvml.json"
    # a GPU whose memory stays in use with no process to kill: reset cannot make it idle
    nvml.write_text(json.dumps({"driver_version": "570.124.06", "cuda_driver_version": "12.8", "gpus": [
        {"name": "NVIDIA H200", "memory_used_mb": 90000.0 if busy else 615.0, "memory_total_mb": 143771.0,
         "temperature_c": 37, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "power_w": 79.5,
         "power_limit_w": 700.0, "throttle_reasons": 0}]}))
    p = cli(tmp_path, "gpu", "reset", exp, "--json", env={"BISECT_LAB_FAKE_NVML": str(nvml)})
    assert p.returncode == code, (p.stdout, p.stderr)
    res = json.loads(p.stdout)
    assert [r["ok"] for r in res.values()] == [not busy]
    if busy:
        line = one_line_error(p, 4)
        assert "did not succeed" in line and "Traceback" not in p.stderr


def markup_toy(tmp_path):
    """A toy whose patch set carries rich markup in every user-written field."""
    from gitrepos import GitRepo, PatchSpec, write_patchset
    exp = make_toy(tmp_path)
    repo = GitRepo(tmp_path / "target")
    write_patchset(tmp_path / "patches", [
        PatchSpec("slow", repo.patch({"knobs_slow.py": "FACTORS['slow'] = 0.7\n", "odd[/]dir/[bold]x.py": "1\n"}),
                  aliases=("s[/]", "[bold]b"), description="[/] closes nothing [bold]loud",
                  file="slow[red][bold].patch"),
        PatchSpec("noop", repo.patch({"knobs_noop.py": "FACTORS['noop'] = 1.0\n"}), aliases=("[/]",)),
    ])
    return exp


WIDE = {"COLUMNS": "250"}          # rich tables would wrap the cells the test looks for


def test_rich_markup_in_patch_set_fields_is_printed_as_text(tmp_path):
    exp = markup_toy(tmp_path)
    p = cli(tmp_path, "patches", "list", exp, env=WIDE)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    out = p.stdout
    for text in ("s[/]", "[bold]b", "[/]", "[bold]x.py", "slow"):
        assert text in out, (text, out)
    c = cli(tmp_path, "patches", "check", exp, env=WIDE)
    assert c.returncode == 0 and "Traceback" not in c.stderr, c.stderr


def test_rich_markup_in_env_values_and_arms_survives_run_and_diff(tmp_path):
    exp = make_toy(tmp_path, extra_toml='[env]\nTOY_NOTE = "[/] and [bold]x"\n')
    exp2 = tmp_path / "toy2.toml"
    exp2.write_text(exp.read_text().replace('"[/] and [bold]x"', '"[bold]y [/]"'))
    a = cli(tmp_path, "run", exp, "--patches", "all TOY_ARM=[/]", "--repeat", "1", "--json")
    assert a.returncode == 0, a.stderr
    b = cli(tmp_path, "run", exp2, "--patches", "all TOY_ARM=[bold]", "--repeat", "1", "--json")
    assert b.returncode == 0, b.stderr
    h = cli(tmp_path, "run", exp, "--patches", "all TOY_ARM=[bold]", "--repeat", "1", env=WIDE)
    assert h.returncode == 0 and "Traceback" not in h.stderr, h.stderr
    assert "TOY_ARM='[bold]'" in h.stdout, h.stdout
    cid_a, cid_b = json.loads(a.stdout)["campaign"], json.loads(b.stdout)["campaign"]
    d = cli(tmp_path, "diff", cid_a, cid_b, env=WIDE)
    assert d.returncode == 0 and "Traceback" not in d.stderr, d.stderr
    for text in ("TOY_ARM='[/]'", "TOY_ARM='[bold]'", "[/] and [bold]x", "[bold]y [/]"):
        assert text in d.stdout, (text, d.stdout)


def test_default_results_never_go_inside_the_target_repository(tmp_path):
    """Results follow the experiment (beside it, whatever the cwd), an experiment file inside its
    target repository has them in the user data dir, and the target's checkout stays clean."""
    exp = make_toy(tmp_path)
    target = tmp_path / "target"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    env.pop("BISECT_LAB_RESULTS", None)

    def run(*args, cwd=target):
        return subprocess.run([sys.executable, "-m", "bisect_lab", "--cache", str(tmp_path / "cache"), *map(str, args)],
                              cwd=cwd, capture_output=True, text=True, timeout=120, env=env)

    def said(p):
        lines = [l for l in p.stderr.splitlines() if l.startswith("results: ")]
        assert len(lines) == 1, p.stderr
        return lines[0]

    def clean():
        return subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=target, capture_output=True,
                              text=True, check=True).stdout

    # run from inside the target: the results go beside the experiment, not into the checkout
    p = run("run", exp, "--patches", "all", "--repeat", "1", "--json")
    assert p.returncode == 0, p.stderr
    assert "--results to change" in said(p) and Path(said(p).split()[1]) == tmp_path / "results"
    assert (tmp_path / "results" / "bisect-lab.sqlite").is_file()
    assert clean() == ""
    r = run("report", "latest")               # from the target, which has no ./results: the last campaign's
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).is_relative_to(tmp_path / "results")
    assert json.loads(p.stdout)["campaign"] in Path(r.stdout.strip()).read_text()
    # an experiment file kept inside its target repository: the user data dir
    inner = target / "bench" / "in.toml"
    inner.parent.mkdir()
    inner.write_text(exp.read_text().replace('repo = "target"', f'repo = {str(target)!r}')
                     .replace('patches = "patches"', f'patches = {str(tmp_path / "patches")!r}'))
    subprocess.run(["git", "add", "bench/in.toml"], cwd=target, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "exp"], cwd=target,
                   check=True)
    q = run("run", inner, "--patches", "all", "--repeat", "1", cwd=tmp_path)
    assert q.returncode == 0, q.stderr
    where = Path(said(q).split()[1])
    assert (where / "bisect-lab.sqlite").is_file() and where.is_relative_to(tmp_path / "data"), q.stderr
    assert clean() == ""
    # --results / BISECT_LAB_RESULTS still win, and the line says so
    e = run("--results", tmp_path / "chosen", "run", exp, "--patches", "all", "--repeat", "1")
    assert e.returncode == 0 and (tmp_path / "chosen" / "bisect-lab.sqlite").is_file(), e.stderr
    assert "(--results)" in said(e)
    assert clean() == ""
