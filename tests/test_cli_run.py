"""`bisect-lab run` end to end, through the real CLI in a subprocess, on a real git target."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from toyexp import make_toy


def cli(tmp_path, *args, env=None, timeout=120):
    cmd = [sys.executable, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "--cache", str(tmp_path / "cache"),
           *map(str, args)]
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)


def campaign_rows(tmp_path, cid, cols="trial, arm, started"):
    """A campaign's stored trials (``cols``), in order: what a resume must keep as it was."""
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        return db.execute(f"SELECT {cols} FROM trials WHERE campaign=? ORDER BY trial", (cid,)).fetchall()


def go_on_campaign(stdout: str, option: str) -> str:
    """The campaign that the human output says can go on with ``--resume CAMPAIGN <option> N``."""
    out = " ".join(stdout.split())
    assert "the same command with --resume " in out and f"{option} N (N > " in out, out
    return out.split("--resume ")[1].split()[0]


def one_line_error(p, code):
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    errors = [l for l in p.stderr.splitlines() if l.startswith("bisect-lab: error:")]
    assert len(errors) == 1, p.stderr
    return errors[0]


@pytest.fixture
def toy(tmp_path):
    return make_toy(tmp_path)


def test_run_json_contract_and_planted_effect(tmp_path, toy):
    p = cli(tmp_path, "run", toy, "--patches", "all", "--patches", "all-minus slow", "--repeat", "4", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)                     # stdout holds one JSON object and nothing else
    assert set(res) >= {"arms", "comparisons", "campaign"}
    arms = {a["arm"]: a for a in res["arms"]}
    assert set(arms) == {"all", "all-minus slow"}
    assert arms["all"]["n"] == 4 and arms["all-minus slow"]["n"] == 4
    assert arms["all"]["median"] == pytest.approx(70, rel=0.05)
    (c,) = res["comparisons"]
    # Removing the planted 30% slowdown: ratio 1/0.7, well clear of 1 (a 95% CI may miss 1/0.7 itself).
    assert c["verdict"] == "different" and c["ratio"] == pytest.approx(1 / 0.7, rel=0.05)
    assert 1.2 < c["ci_low"] < c["ratio"] < c["ci_high"]
    # The trials are in the store, one row per trial, with the DataFrame contract.
    import bisect_lab
    df = bisect_lab.load(tmp_path / "res").trials(res["campaign"])
    assert len(df) == 8 and set(df["status"]) == {"ok"}
    # Interleaved: a randomised balanced order, not all of one arm first.
    assert list(df["arm"][:4]).count("all") == 2


def test_run_with_several_arms_reports_holm_adjusted_p_values(tmp_path, toy):
    p = cli(tmp_path, "run", toy, "--patches", "all", "--patches", "all-minus slow", "--patches",
            "all-minus noop", "--repeat", "3", "--json")
    assert p.returncode == 0, p.stderr
    comps = json.loads(p.stdout)["comparisons"]
    assert len(comps) == 3
    ranked = sorted(c["p_value"] for c in comps)
    for c in comps:
        # Holm: the smallest p-value times 3, the next times 2 (never below the one before), ...
        k = ranked.index(c["p_value"])
        assert c["p_adjusted"] >= min(1.0, c["p_value"] * (3 - k)) - 1e-12
    slow = [c for c in comps if "all-minus slow" in (c["a"], c["b"])]
    assert len(slow) == 2 and all(c["verdict"] == "different" for c in slow)   # the planted 30%
    human = cli(tmp_path, "run", toy, "--patches", "all", "--patches", "all-minus slow", "--patches",
                "all-minus noop", "--repeat", "3")
    assert "p (Holm)" in human.stdout, human.stdout


def test_run_compares_secondary_metrics_in_one_holm_family(tmp_path):
    """[benchmark.secondary]: latency is compared too, in its own direction (lower is better), and
    every metric's comparisons share one Holm family; the human output and the report show it."""
    from statsmodels.stats.multitest import multipletests
    exp = make_toy(tmp_path, extra_toml="""
        [benchmark.secondary]
        median_ttft_ms = "lower"
    """)
    p = cli(tmp_path, "run", exp, "--patches", "none", "--patches", "none TOY_TTFT=1.3", "--repeat", "4", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    (tput,) = res["comparisons"]
    (sec,) = res["secondary"]
    assert sec["metric"] == "median_ttft_ms" and sec["higher_is_better"] is False
    assert [a["n"] for a in sec["arms"]] == [4, 4]
    (ttft,) = sec["comparisons"]
    assert ttft["ratio"] == pytest.approx(1.3, rel=0.05)              # the planted latency change
    assert ttft["verdict"] == "different" and ttft["regression"] is True
    # Throughput is the same configuration on both sides (A/A): at alpha 5% its comparison reads
    # "different" in about 1 run in 40 by chance (CI, 2026-12-02: ratio 0.987, a 1.3% "regression"
    # at CV 1%, n=4); what must hold is that no real slowdown is claimed.
    assert tput["ratio"] == pytest.approx(1.0, abs=0.04)
    assert not (tput["regression"] and tput["ci_high"] < 1 - 0.04), tput
    expected = multipletests([tput["p_value"], ttft["p_value"]], method="holm")[1]
    assert [tput["p_adjusted"], ttft["p_adjusted"]] == pytest.approx(list(expected))

    report = cli(tmp_path, "report", res["campaign"], "--format", "md", "--out", tmp_path / "r.md")
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "r.md").read_text()
    assert "Secondary metric: median_ttft_ms (lower is better)" in md, md
    assert "slower** on median_ttft_ms than `none` (95% CI " in md, md     # worse in the metric's direction

    human = cli(tmp_path, "run", exp, "--patches", "none", "--patches", "none TOY_TTFT=1.3", "--repeat", "3")
    assert human.returncode == 0, human.stderr
    out = " ".join(human.stdout.split())
    assert "median_ttft_ms (lower is better) — secondary metric" in out, out
    assert "median_ttft_ms: comparisons" in out and "p (Holm)" in out, out


def test_run_human_output_and_single_arm_compares_to_none(tmp_path, toy):
    p = cli(tmp_path, "run", toy, "--patches", "all-minus slow", "--repeat", "3")
    assert p.returncode == 0, p.stderr
    # one arm alone is measured beside `none`, its baseline (never an implicit `all`)
    assert "Comparisons" in p.stdout and "the baseline is none" in " ".join(p.stdout.split())
    assert "all-minus slow" in p.stdout and "different" not in p.stdout
    assert "[6/6]" in p.stderr                         # progress, on stderr


@pytest.mark.parametrize("args, code, words", [
    (["run", "NOPE.toml"], 2, "experiment file not found"),
    (["run", "{toy}", "--patches", "all-minus zzz"], 2, "valid names (aliases): slow, noop, gated, fast"),
    (["run", "{toy}", "--patches", "sometimes"], 2, "must start with one of"),
    (["run", "{toy}", "--repeat", "x"], 2, "invalid int value"),
    (["frobnicate"], 2, "invalid choice"),
    (["run", "{toy}", "--resume"], 2, "nothing to resume"),
])
def test_usage_errors_are_one_line_exit_2(tmp_path, toy, args, code, words):
    p = cli(tmp_path, *[a.replace("{toy}", str(toy)) for a in args])
    assert words in one_line_error(p, code)


def test_malformed_toml_is_exit_2(tmp_path, toy):
    toy.write_text(toy.read_text() + "\n[benchmark\n")
    line = one_line_error(cli(tmp_path, "run", toy), 2)
    assert "toy.toml" in line and "malformed TOML" in line


def test_patch_that_does_not_apply_is_exit_2_naming_patch_and_file(tmp_path):
    exp = make_toy(tmp_path, conflict=True)
    line = one_line_error(cli(tmp_path, "run", exp, "--patches", "all"), 2)
    assert "clash" in line or "slow" in line
    assert "knobs_slow.py" in line


@pytest.mark.parametrize("knob, words", [
    ("TOY_CRASH", "CUDA error: out of memory (toy)"),
    ("TOY_GARBAGE", "parse"),
])
def test_benchmark_failing_every_time_is_exit_4_with_its_own_error(tmp_path, knob, words):
    exp = make_toy(tmp_path, extra_toml=f'[env]\n{knob} = "1"\n')
    p = cli(tmp_path, "run", exp, "--patches", "all", "--patches", "none", "--repeat", "3")
    assert p.returncode == 4, p.stderr
    assert "Traceback" not in p.stderr and words in p.stderr
    db = sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite")
    statuses = [r[0] for r in db.execute("SELECT status FROM trials")]
    assert len(statuses) == 3 and set(statuses) == {"crashed" if knob == "TOY_CRASH" else "parse-error"}


def test_hanging_benchmark_times_out_and_its_whole_tree_is_killed(tmp_path):
    import psutil
    exp = make_toy(tmp_path, timeout_s=1.5, extra_toml='[env]\nTOY_HANG = "1"\n')
    before = {p.pid for p in psutil.process_iter()}
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1")
    assert p.returncode == 4 and "timed out after 1.5 s" in p.stderr, p.stderr
    time.sleep(0.5)
    leftovers = [q for q in psutil.process_iter(["pid", "cmdline"]) if q.pid not in before
                 and "time.sleep(600)" in " ".join(q.info["cmdline"] or [])]
    assert not leftovers


def test_env_verification_sees_workers_that_drop_the_var(tmp_path):
    exp = make_toy(tmp_path)
    p = cli(tmp_path, "run", exp, "--patches", "all NCCL_ALGO=Ring TOY_SPAWN=1", "--repeat", "2", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    by_var = {v["var"]: v for v in res["env_propagation"]["vars"]}
    algo = by_var["NCCL_ALGO"]
    assert 0 < algo["matched"] < algo["total"]
    assert any("NCCL_ALGO=Ring" in w and "reached" in w for w in res["warnings"])


def test_kill_9_then_resume_stores_every_finished_trial_exactly_once(tmp_path, toy):
    cmd = [sys.executable, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "--cache",
           str(tmp_path / "cache"), "run", str(toy), "--patches", "all", "--patches", "none", "--repeat", "25"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    db_path = tmp_path / "res" / "bisect-lab.sqlite"
    deadline = time.time() + 90
    n = 0
    while time.time() < deadline and n < 12:
        time.sleep(0.2)
        if db_path.exists():
            try:
                n = sqlite3.connect(db_path).execute("SELECT COUNT(*) FROM trials").fetchone()[0]
            except sqlite3.OperationalError:
                pass
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    db = sqlite3.connect(db_path)
    before = db.execute("SELECT trial, arm, started FROM trials ORDER BY trial").fetchall()
    assert 12 <= len(before) < 50
    p = cli(tmp_path, "run", toy, "--patches", "all", "--patches", "none", "--repeat", "25", "--resume", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    after = sqlite3.connect(db_path).execute(
        "SELECT trial, arm, started FROM trials WHERE campaign=? ORDER BY trial", (res["campaign"],)).fetchall()
    assert after[:len(before)] == before                      # finished trials kept, never re-run
    assert len(after) == 50 and len({t for t, _, _ in after}) == 50
    assert {a["arm"]: a["n"] for a in res["arms"]} == {"all": 25, "none": 25}
    # Resuming a finished campaign is refused.
    again = cli(tmp_path, "run", toy, "--patches", "all", "--patches", "none", "--repeat", "25", "--resume", res["campaign"])
    assert "already finished" in one_line_error(again, 2)


def test_unquoted_arm_specs_as_the_card_shows(tmp_path, toy):
    # `bisect-lab run --patches all-minus topk`: the shell splits the spec into words.
    p = cli(tmp_path, "run", "--patches", "all-minus", "slow", "NCCL_PROTO=LL", toy, "--repeat", "2", "--json")
    assert p.returncode == 0, p.stderr
    assert [a["arm"] for a in json.loads(p.stdout)["arms"]] == ["none", "all-minus slow NCCL_PROTO=LL"]


def test_secrets_never_reach_the_results_or_the_output(tmp_path):
    exp = make_toy(tmp_path, extra_toml='[env]\nHF_TOKEN = "hf_abc123secretvalue"\nMY_PASSWORD = "hunter2-xyz"\n')
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1", "--json")
    assert p.returncode == 0, p.stderr
    raw = (tmp_path / "res" / "bisect-lab.sqlite").read_bytes()
    for wal in (tmp_path / "res").glob("*-wal"):
        raw += wal.read_bytes()
    for secret in ("hf_abc123secretvalue", "hunter2-xyz"):
        assert secret.encode() not in raw
        assert secret not in p.stdout and secret not in p.stderr
    human = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1")
    assert "hf_abc123secretvalue" not in human.stdout + human.stderr


def test_children_left_running_by_the_benchmark_are_killed(tmp_path):
    import psutil
    exp = make_toy(tmp_path, bench_command="(sleep 97 &) ; python3 bench.py")
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "2")
    assert p.returncode == 0, p.stderr
    time.sleep(0.3)
    assert not [q for q in psutil.process_iter(["cmdline"]) if q.info["cmdline"] == ["sleep", "97"]]


def test_sigterm_kills_the_benchmark_and_leaves_a_resumable_campaign(tmp_path):
    import psutil
    exp = make_toy(tmp_path, timeout_s=60, extra_toml='[env]\nTOY_HANG = "1"\n')
    cmd = [sys.executable, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "--cache",
           str(tmp_path / "cache"), "run", str(exp), "--patches", "all", "--repeat", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not [q for q in psutil.process_iter(["cmdline"])
                                          if "time.sleep(600)" in " ".join(q.info["cmdline"] or [])]:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "--resume" in err, err
    time.sleep(0.3)
    assert not [q for q in psutil.process_iter(["cmdline"]) if "time.sleep(600)" in " ".join(q.info["cmdline"] or [])]
    status = sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite").execute(
        "SELECT status FROM campaigns").fetchone()[0]
    assert status == "interrupted"


def test_markup_like_text_in_arm_specs_is_printed_verbatim(tmp_path, toy):
    p = cli(tmp_path, "run", toy, "--patches", "none X=[/]", "--repeat", "1")
    assert p.returncode == 0, p.stderr
    assert "none X='[/]'" in p.stdout        # the canonical spec, shell-quoted


def test_json_is_strict_and_budgets_must_be_positive(tmp_path, toy):
    p = cli(tmp_path, "run", toy, "--patches", "all", "--repeat", "1", "--json")
    assert p.returncode == 0 and "NaN" not in p.stdout
    json.loads(p.stdout, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert "positive" in one_line_error(cli(tmp_path, "run", toy, "--repeat", "0"), 2)
    assert "positive" in one_line_error(cli(tmp_path, "attribute", toy, "--good", "none", "--bad", "all",
                                            "--max-trials", "-1"), 2)


def test_resume_refuses_a_campaign_of_another_experiment(tmp_path, toy):
    other = make_toy(tmp_path / "other")
    first = json.loads(cli(tmp_path, "run", other, "--patches", "all", "--repeat", "1", "--json").stdout)
    line = one_line_error(cli(tmp_path, "run", toy, "--patches", "all", "--repeat", "1", "--resume",
                              first["campaign"]), 2)
    assert "belongs to" in line


def test_nccl_debug_lines_are_parsed_and_checked_against_the_arm(tmp_path):
    nccl = ("echo 'h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4' >&2; "
            "echo 'h:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL' >&2; python3 bench.py")
    exp = make_toy(tmp_path, bench_command=nccl)
    p = cli(tmp_path, "run", exp, "--patches", "all NCCL_PROTO=LL NCCL_ALGO=Tree", "--repeat", "1", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert any("NCCL never mentioned NCCL_ALGO" in w for w in res["warnings"])
    assert not any("NCCL_PROTO=" in w and "NCCL reported" in w for w in res["warnings"])
    import bisect_lab
    from bisect_lab.store import Store
    st = Store(tmp_path / "res")
    t = st.trials(res["campaign"])[-1]
    assert t.env_report["nccl"]["version"] == "2.21.5+cuda12.4"


def test_a_finished_run_measures_more_in_the_same_campaign(tmp_path):
    """Two trials per arm rarely settle a 1.5% difference: the answer says how to measure more
    exactly when a comparison stayed unknown (`resume_with`), and `--resume CAMPAIGN --repeat 4`
    adds two per arm to the same campaign (the first four kept)."""
    toy = make_toy(tmp_path, effects={"slow": 0.985, "noop": 1.0})
    args = ("run", toy, "--patches", "none", "--patches", "all")
    p = cli(tmp_path, *args, "--repeat", "2", "--json")
    assert p.returncode == 0, p.stderr
    first = json.loads(p.stdout)
    # the toy's noise is not seeded: two tight pairs can settle it ("different" once in CI)
    unknown = any(c["verdict"] == "unknown" for c in first["comparisons"])
    assert first.get("resume_with") == ([{"option": "--repeat", "more_than": 2}] if unknown else None), first
    cid = first["campaign"]
    before = campaign_rows(tmp_path, cid)
    assert len(before) == 4
    more = cli(tmp_path, *args, "--resume", cid, "--repeat", "4", "--json")
    assert more.returncode == 0, more.stderr
    res = json.loads(more.stdout)
    assert res["campaign"] == cid and {a["arm"]: a["n"] for a in res["arms"]} == {"none": 4, "all": 4}, res
    after = campaign_rows(tmp_path, cid)
    assert after[:4] == before and len(after) == 8
    assert sorted(a for _, a, _ in after[4:]) == ["all", "all", "none", "none"]
