"""An attribution that meets a burst of host contention says so: the reference guard holds the
reading, reads the good arm, leaves the burst out, measures the arm again, and names the burst's
trials in --json's warnings and extra; the answer holds. A real campaign of the toy target."""
import json
import sys
import textwrap

from test_cli_run import cli
from toyexp import make_toy

# Runs the toy's bench.py (its noise seeded by the call number); calls FROM..TO (a burst: every
# reading, whatever the arm) report 70% of the throughput. A counter file outside the tree counts.
BURST_WRAPPER = textwrap.dedent('''
    import os, re, subprocess, sys
    counter, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    n = int(open(counter).read() or 0) + 1 if os.path.exists(counter) else 1
    open(counter, "w").write(str(n))
    seeded = f"import random, runpy; random.seed({n}); runpy.run_path('bench.py', run_name='__main__')"
    out = subprocess.run([sys.executable, "-c", seeded], capture_output=True, text=True, check=True).stdout
    if lo <= n <= hi:
        out = re.sub(r"(Output token throughput \\(tok/s\\):\\s+)([0-9.]+)",
                     lambda m: m.group(1) + f"{float(m.group(2)) * 0.7:.2f}", out)
    sys.stdout.write(out)
''')


def test_a_burst_in_an_attribution_is_left_out_and_named(tmp_path):
    # a 5% culprit: the good arm is read twice before the burst, so its level is known
    exp = make_toy(tmp_path, effects={"slow": 0.95, "noop": 1.0, "gated": 1.0, "fast": 1.0})
    wrapper = tmp_path / "burst.py"
    wrapper.write_text(BURST_WRAPPER)
    counter = tmp_path / "calls.txt"
    # trials 5-8: every reading 30% slow, whatever the arm
    exp.write_text(exp.read_text().replace('command = "python3 bench.py"',
                                           f'command = "{sys.executable} {wrapper} {counter} 5 8"'))
    p = cli(tmp_path, "attribute", exp, "--good", "none", "--bad", "all", "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["status"] == "culprits" and res["culprits"] == ["slow"], (res["status"], res["culprits"])
    bursts = res["extra"]["bursts"]
    assert bursts and all(not b["kept"] for b in bursts), bursts
    left = sorted(t for b in bursts for t in b["trials"])
    assert left and set(left) <= set(range(5, 9)), left          # only burst readings left out
    lines = [w for w in res.get("warnings") or [] if "left out as a burst of host contention" in w]
    assert len(lines) == len(bursts) and lines[0].startswith(f"trials {bursts[0]['trials'][0]}-"), lines
