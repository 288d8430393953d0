"""The [server] table of experiment files (docs/contracts.md, Serving sessions): defaults and precise errors."""
import textwrap

import pytest

from bisect_lab.config import load_experiment
from bisect_lab.errors import ConfigError

BASE = """
[target]
repo = "repo"
[benchmark]
command = "python bench.py --port {port}"
[server]
command = "python -m sglang.launch_server --port {port}"
"""


def write(tmp_path, body):
    (tmp_path / "repo").mkdir(exist_ok=True)
    p = tmp_path / "exp.toml"
    p.write_text(textwrap.dedent(body))
    return p


def test_server_defaults_and_values(tmp_path):
    assert load_experiment(write(tmp_path, BASE.replace("[server]\n", "").rsplit("command", 1)[0])).server is None
    e = load_experiment(write(tmp_path, BASE + 'ready_url = "http://127.0.0.1:{port}/health"\n'))
    s = e.server
    assert s.command.endswith("--port {port}") and s.ready_url == "http://127.0.0.1:{port}/health"
    assert (s.ready_log, s.ready_timeout_s, s.stop_timeout_s, s.readings, s.warmup_readings) == (None, 900, 60, "auto", 1)
    e = load_experiment(write(tmp_path, BASE + "ready_log = 'fired up'\nreadings = 4\nwarmup_readings = 0\n"
                                               "ready_timeout_s = 30\nstop_timeout_s = 1.5\n"))
    assert (e.server.ready_log, e.server.readings, e.server.warmup_readings) == ("fired up", 4, 0)
    assert (e.server.ready_timeout_s, e.server.stop_timeout_s) == (30.0, 1.5)


@pytest.mark.parametrize("extra, key, words", [
    ("", "server", "needs ready_url"),
    ("ready_urll = 'http://x'\n", "server.ready_urll", "did you mean 'ready_url'?"),
    ("ready_log = '('\n", "server.ready_log", "bad regex"),
    ("ready_url = 'localhost:{port}'\n", "server.ready_url", "http:// or https://"),
    ("ready_log = 'x'\nreadings = 0\n", "server.readings", 'integer >= 1 or "auto"'),
    ("ready_log = 'x'\nreadings = 'many'\n", "server.readings", 'integer >= 1 or "auto"'),
    ("ready_log = 'x'\nreadings = true\n", "server.readings", 'integer >= 1 or "auto"'),
    ("ready_log = 'x'\nwarmup_readings = -1\n", "server.warmup_readings", "integer >= 0"),
    ("ready_log = 'x'\nready_timeout_s = 0\n", "server.ready_timeout_s", "positive"),
    ("ready_log = 'x'\nstop_timeout_s = 'soon'\n", "server.stop_timeout_s", "expected float"),
    ("ready_log = 'x'\ncommand = 3\n", None, "command"),
])
def test_server_errors_name_the_key(tmp_path, extra, key, words):
    body = BASE + extra
    if "command = 3" in extra:
        body = body.replace('command = "python -m sglang.launch_server --port {port}"\n', "")
    with pytest.raises(ConfigError) as e:
        load_experiment(write(tmp_path, body))
    msg = str(e.value)
    assert words in msg and "exp.toml" in msg and "\n" not in msg, msg
    if key:
        assert key in msg, msg


def test_server_without_command_is_named(tmp_path):
    body = BASE.replace('command = "python -m sglang.launch_server --port {port}"\n', "ready_log = 'x'\n")
    with pytest.raises(ConfigError) as e:
        load_experiment(write(tmp_path, body))
    assert "server.command" in str(e.value) and "missing" in str(e.value)


def test_server_cli_error_is_one_line_exit_2(tmp_path):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "run",
                        str(write(tmp_path, BASE)), "--patches", "none"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    (line,) = [l for l in p.stderr.splitlines() if l.startswith("bisect-lab: error:")]
    assert "needs ready_url" in line


def test_server_with_a_slurm_cluster_loads_both(tmp_path):
    """Sessions run whole inside Slurm jobs (tests/test_slurm_fleet.py): the two tables load together."""
    p = write(tmp_path, BASE + 'ready_log = "ready"\n[cluster]\nengine = "slurm"\npartition = "debug"\n')
    exp = load_experiment(p)
    assert exp.server is not None and exp.cluster.is_slurm and exp.cluster.partition == "debug"
