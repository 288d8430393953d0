"""Per-trial overhead of bisect-lab on a warm tree: everything but the benchmark itself.

Runs N trials of a benchmark that does nothing but print one result line, through the
real runner (tree reuse, import check, GPU probe, spawn + env sampling, parse,
fingerprint, SQLite commit), and prints, side by side in the same run:

- baseline: the same command started bare with subprocess (what the benchmark costs);
- bisect-lab local: trial wall time minus the benchmark's own time;
- bisect-lab over SSH (when a local sshd can be started, as in the tests).

Usage: python benchmarks/trial_overhead.py [--trials 30] [--no-ssh]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def experiment(root: Path, host_toml: str = "") -> Path:
    from gitrepos import GitRepo, PatchSpec, write_patchset
    repo = GitRepo.init(root / "target")
    repo.commit("bench", {"pkg/__init__.py": "", "bench.sh": "echo 'Output token throughput (tok/s): 100.0'\n"})
    write_patchset(root / "patches", [PatchSpec("p1", repo.patch({"pkg/a.py": "x = 1\n"})),
                                      PatchSpec("p2", repo.patch({"pkg/b.py": "y = 1\n"}))])
    exp = root / "exp.toml"
    exp.write_text(f"""
[target]
repo = "target"
patches = "patches"
import_check = "pkg"
pythonpath = ["."]
[benchmark]
command = "bash bench.sh"
parser = "regex"
metric = "output_throughput"
[benchmark.patterns]
output_throughput = 'Output token throughput \\(tok/s\\):\\s+([0-9.]+)'
[design]
seed = 0
{host_toml}
""")
    return exp


def measure(exp_path: Path, root: Path, trials: int) -> list[float]:
    from bisect_lab.campaigns import Session, run_arms
    from bisect_lab.config import load_experiment
    from bisect_lab.hosts import make_hosts
    from bisect_lab.store import Store
    exp = load_experiment(exp_path)
    store = Store(root / "results")
    s = Session(exp, store, make_hosts(exp.host, cache_dir=root / "cache"))
    run_arms(s, ["all"], repeat=2)                       # warm: clone, tree, caches
    res = run_arms(s, ["all"], repeat=trials)
    out = []
    for t in store.trials(res["campaign"]):
        extra = store.trial_extra(t.campaign, t.trial)
        out.append(t.duration_s - extra.get("benchmark_s", 0.0))
    s.close()
    return out


def baseline(trials: int) -> list[float]:
    out = []
    for _ in range(trials):
        t0 = time.perf_counter()
        subprocess.run(["bash", "-c", "echo 'Output token throughput (tok/s): 100.0'"], capture_output=True)
        out.append(time.perf_counter() - t0)
    return out


def fmt(name: str, xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]
    return f"{name:<44} {statistics.median(xs) * 1000:9.1f} ms {p95 * 1000:9.1f} ms {len(xs):5d}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--no-ssh", action="store_true")
    a = ap.parse_args()
    print(f"{'what':<44} {'median':>12} {'p95':>12} {'n':>5}")
    print(fmt("baseline: bare subprocess of the benchmark", baseline(a.trials)))
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "local"
        root.mkdir()
        print(fmt("bisect-lab overhead per trial, local", measure(experiment(root), root, a.trials)))
    if a.no_ssh:
        return
    import sshd_fixture

    class Factory:
        def mktemp(self, name):
            return Path(tempfile.mkdtemp(prefix=name))
    try:
        gen = sshd_fixture.sshd.__wrapped__(Factory())
        sshd = next(gen)
    except BaseException as e:     # pytest.skip raises a BaseException subclass
        print(f"(no SSH figures: {e})")
        return
    os.environ.update(sshd.env())
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        host = (f'[host]\nssh = "{sshd.target}"\nport = {sshd.port}\nkey = "{sshd.key_path}"\n'
                f'workdir = "{root / "remote"}"\n')
        print(fmt("bisect-lab overhead per trial, SSH (localhost)", measure(experiment(root, host), root, a.trials)))


if __name__ == "__main__":
    main()
