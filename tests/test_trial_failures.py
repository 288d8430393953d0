"""How a failed benchmark is classified and told: signals, zero throughput, timeouts without output.
Real CLI runs on the toy target (tests/toyexp.py)."""
import json
import sqlite3

from test_cli_run import cli, one_line_error
from toyexp import make_toy


def _trials(tmp_path):
    return sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite").execute(
        "SELECT status, error FROM trials ORDER BY trial").fetchall()


def test_a_kill_from_outside_is_named_and_retried(tmp_path):
    # The first try is SIGKILLed (as the OOM killer would), the retry measures.
    marker = tmp_path / "killed-once"
    exp = make_toy(tmp_path, bench_command=f"if [ -e {marker} ]; then python3 bench.py; "
                                           f"else touch {marker}; kill -KILL $$; fi")
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1", "--json")
    assert p.returncode == 0, p.stderr
    (killed, ok) = _trials(tmp_path)
    assert killed == ("killed", "benchmark was killed by SIGKILL (signal 9; often the out-of-memory killer), "
                                "exit status 137: (no output)")
    assert ok[0] == "ok"
    assert json.loads(p.stdout)["arms"][0]["n"] == 1


def test_a_benchmark_that_crashes_by_a_signal_is_crashed_and_says_which(tmp_path):
    exp = make_toy(tmp_path, bench_command="echo segfaulting >&2; kill -SEGV $$")
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "3")
    assert "killed by SIGSEGV (signal 11)" in one_line_error(p, 4)
    rows = _trials(tmp_path)
    assert len(rows) == 3 and {s for s, _ in rows} == {"crashed"}       # its own fault: not retried
    assert rows[0][1] == "benchmark was killed by SIGSEGV (signal 11), exit status 139: segfaulting"


def test_a_normal_nonzero_exit_stays_crashed(tmp_path):
    exp = make_toy(tmp_path, bench_command="exit 7")
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "3")
    one_line_error(p, 4)
    assert _trials(tmp_path) == [("crashed", "benchmark exited with 7: (no output)")] * 3


def test_zero_throughput_is_not_a_measurement(tmp_path):
    # A patch that zeroes the toy's throughput: the benchmark "served nothing".
    exp = make_toy(tmp_path, effects={"dead": 0.0, "noop": 1.0})
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "2")
    line = one_line_error(p, 4)
    assert "metric output_throughput = 0.0 is not a positive number" in line, line
    assert {s for s, _ in _trials(tmp_path)} == {"parse-error"}


def test_zero_secondary_metric_is_not_a_measurement(tmp_path):
    exp = make_toy(tmp_path, extra_toml='[env]\nTOY_TTFT = "0"\n[benchmark.secondary]\nmedian_ttft_ms = "lower"\n')
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "2")
    assert "metric median_ttft_ms = 0.0 is not a positive number" in one_line_error(p, 4)


def test_a_timeout_without_output_has_no_dangling_colon(tmp_path):
    exp = make_toy(tmp_path, timeout_s=1, extra_toml='[env]\nTOY_HANG = "1"\n')
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1")
    one_line_error(p, 4)
    assert {e for _, e in _trials(tmp_path)} == {"benchmark timed out after 1 s"}
