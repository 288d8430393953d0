"""A bisection that meets a stall says so: the reading its noise model discounts is named (trial,
commit, value) in the text output, in --json's warnings and in the report, and the answer holds."""
import json
import textwrap

from test_cli_bisect import repo_with_history
from test_cli_run import cli

# Runs the tree's bench.py (its noise seeded by the call number) and, on its STALL_AT-th call, reports a third of the throughput (a page-
# cache miss, a shared box): a counter file outside the tree keeps the count across trials.
WRAPPER = textwrap.dedent('''
    import re, subprocess, sys
    counter, stall_at = sys.argv[1], int(sys.argv[2])
    n = int(open(counter).read() or 0) + 1 if __import__("os").path.exists(counter) else 1
    open(counter, "w").write(str(n))
    # the bench's noise seeded by the call number: the same readings every run (unseeded, a 1%
    # Gaussian draw now and then read as a second discounted reading or moved the search)
    seeded = f"import random, runpy; random.seed({n}); runpy.run_path('bench.py', run_name='__main__')"
    out = subprocess.run([sys.executable, "-c", seeded], capture_output=True, text=True, check=True).stdout
    if n == stall_at:
        out = re.sub(r"([0-9.]+)$", lambda m: f"{float(m.group(1)) / 3:.3f}", out.strip()) + "\\n"
    sys.stdout.write(out)
''')


def test_a_stalled_reading_is_discounted_and_shown_everywhere(tmp_path):
    _, good, shas, exp = repo_with_history(tmp_path, n=12, culprit=7)
    wrapper = tmp_path / "stall.py"
    wrapper.write_text(WRAPPER)
    counter = tmp_path / "calls.txt"
    text = exp.read_text().replace('command = "python3 bench.py"',
                                   f'command = "python3 {wrapper} {counter} 9"')
    exp.write_text(text)
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["status"] == "culprit" and res["commit"] == shas[7]
    lines = [w for w in res.get("warnings") or [] if "discounted as stalls" in w]
    assert len(lines) == 1, res.get("warnings")
    assert lines[0].startswith("1 reading(s) discounted") and "trial 9 at " in lines[0], lines[0]
    assert res["discounted"], res["discounted"]

    cid = res["campaign"]
    md = cli(tmp_path, "report", cid, "--format", "md", timeout=120)
    assert md.returncode == 0, md.stderr
    out = md.stdout if "discounted as stalls" in md.stdout else ""
    if not out:      # the report went to a file: read the one it names
        path = next(w for w in md.stdout.split() if w.endswith(".md"))
        out = open(path).read()
    assert "## Warnings" in out and "trial 9 at " in out


# As WRAPPER, but calls FROM..TO (a burst of host contention: every reading, whatever its commit)
# report 70% of the throughput.
BURST_WRAPPER = WRAPPER.replace("counter, stall_at = sys.argv[1], int(sys.argv[2])",
                                "counter, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])") \
    .replace("if n == stall_at:", "if lo <= n <= hi:") \
    .replace("/ 3:.3f", "* 0.7:.3f")


def test_a_burst_is_left_out_and_named(tmp_path):
    _, good, shas, exp = repo_with_history(tmp_path, n=12, culprit=7)
    wrapper = tmp_path / "burst.py"
    wrapper.write_text(BURST_WRAPPER)
    counter = tmp_path / "calls.txt"
    exp.write_text(exp.read_text().replace('command = "python3 bench.py"',
                                           f'command = "python3 {wrapper} {counter} 9 12"'))
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["status"] == "culprit" and res["commit"] == shas[7]
    lines = [w for w in res.get("warnings") or [] if "burst of host contention" in w]
    assert len(lines) == 1 and lines[0].startswith("trials 9-12: 4 reading(s) left out"), res.get("warnings")
    assert "read slow 3 time(s)" in lines[0], lines[0]
    assert not [w for w in res.get("warnings") or [] if "discounted as stalls" in w]
    (b,) = res["bursts"]
    assert len(b["trials"]) == 4 and set(b["trials"]) <= set(res["discounted"])
    md = cli(tmp_path, "report", res["campaign"], "--format", "md", timeout=120)
    assert md.returncode == 0, md.stderr
    out = md.stdout if "burst of host contention" in md.stdout else \
        open(next(w for w in md.stdout.split() if w.endswith(".md"))).read()
    assert "## Warnings" in out and "trials 9-12: 4 reading(s) left out as a burst" in out
