"""Trust in what a trial measured, end to end through the CLI: a benchmark that edits its tree,
a resumed trial's {out} folder, the bound on {out} folders, and where the target package was
imported from."""
import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gitrepos import GitRepo, write_patchset
from test_cli_run import cli, one_line_error
from toyexp import make_toy


def metric_by_trial(tmp_path, campaign):
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        rows = db.execute("SELECT trial, arm, status, metrics FROM trials WHERE campaign=? ORDER BY trial",
                          (campaign,)).fetchall()
    return [(arm, status, json.loads(m or "{}").get("output_throughput")) for _, arm, status, m in rows]


def last_campaign(tmp_path) -> str:
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        return db.execute("SELECT id FROM campaigns ORDER BY created DESC LIMIT 1").fetchone()[0]


def test_a_benchmark_that_edits_its_tree_does_not_poison_later_trials(tmp_path):
    # The reproduction: the benchmark deletes the file a patch added (the 30% slowdown).
    exp = make_toy(tmp_path, bench_command="python3 bench.py; rm -f knobs_slow.py")
    for _ in range(2):                                     # this campaign and a later one
        p = cli(tmp_path, "run", exp, "--patches", "all", "--patches", "none", "--repeat", "3")
        assert p.returncode == 0, p.stderr
        rows = metric_by_trial(tmp_path, last_campaign(tmp_path))
        all_arm = [v for arm, status, v in rows if arm == "all"]
        assert len(all_arm) == 3 and all(status == "ok" for _, status, _ in rows)
        assert all(v == pytest.approx(70, rel=0.06) for v in all_arm), rows
        assert "deleted knobs_slow.py" in p.stderr and "rebuilding" in p.stderr, p.stderr
