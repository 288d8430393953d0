"""Regenerate the sample reports in docs/samples/ (and their PNG screenshots).

    python docs/samples/make_samples.py [--skip-demo] [--no-screenshots]

What it runs (real trials, nothing faked):
- ``run``: the bundled demo, arms none / all / all-minus mla, 5 trials each      -> run.{md,html,png}
- ``attribute``: the demo, good none, bad "all OEA_ENABLE=1"                     -> attribution.{html,png}
- a sweep over 10 "nights" of a toy repository (tests/perf/toytarget.py) whose 5th night
  plants a 15% slowdown, with --bisect-on-regression                                -> sweep.{md,html,png}
  the report of the planted night itself (the alert)                               -> sweep-alert.{html,png}
  and the bisection it launched                                                     -> bisection.{html,png}

Screenshots: headless Chromium (``apt-get install -y chromium``).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "perf"))


def screenshot(html: Path, png: Path, height: int = 7000) -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not exe:
        print("no chromium: skipping", png.name)
        return
    subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size=1100,{height}", f"--screenshot={png}", html.resolve().as_uri()],
                   check=True, capture_output=True, timeout=120)
    # Trim the white space below the page: Chromium screenshots the whole window.
    try:
        import numpy as np
        from matplotlib import image
        img = image.imread(png)
        rows = np.where((img[:, :, :3] < 0.97).any(axis=(1, 2)))[0]
        if rows.size:
            image.imsave(png, img[: min(img.shape[0], rows[-1] + 40)])
    except Exception as e:       # a sample without trimming is still a sample
        print("trim failed:", e)


def demo_samples(results: Path, cache: Path, shots: bool) -> None:
    from bisect_lab.campaigns import Session, attribute, run_arms
    from bisect_lab.config import load_experiment
    from bisect_lab.hosts import make_hosts
    from bisect_lab.report import write_report
    from bisect_lab.store import Store
    exp = load_experiment(ROOT / "experiments" / "demo.toml")
    store = Store(results)
    s = Session(exp, store, make_hosts(exp.host, cache_dir=cache), log=print)
    try:
        res = run_arms(s, ["none", "all", "all-minus mla"], repeat=5)
        for fmt in ("md", "html"):
            write_report(store, res["campaign"], fmt=fmt, out=HERE / f"run.{fmt}")
        if shots:
            screenshot(HERE / "run.html", HERE / "run.png")
        res = attribute(s, "none", "all OEA_ENABLE=1", max_trials=120)
        write_report(store, res["campaign"], fmt="html", out=HERE / "attribution.html")
        if shots:
            screenshot(HERE / "attribution.html", HERE / "attribution.png")
    finally:
        s.close()
        store.close()


def sweep_samples(tmp: Path, shots: bool) -> None:
    from toytarget import Toy

    from bisect_lab.report import write_report
    from bisect_lab.store import Store
    from bisect_lab.campaigns import run_sweep
    toy = Toy(tmp / "toy", cv=0.015, patches={"fast-path": 1.0, "logging": 1.0}, repeat=4)
    sweep = toy.root / "nightly.toml"
    sweep.write_text('name = "toy-nightly"\nexperiment = "toy.toml"\nref = "main"\nrepeat = 4\n'
                     '[matrix]\narms = ["all", "none"]\n[detect]\nmin_effect = 0.05\n[bisect]\nmax_trials = 60\n')
    results = tmp / "results"
    for night in range(10):
        if night == 4:
            toy.touch("scheduler: refactor batch assembly")
            toy.commit(0.85, "attention: gather KV pages then cast (15% slower)")
            toy.touch("docs: update README")
        elif night:
            toy.touch(f"night {night}: unrelated change")
        res = run_sweep(sweep, results=results, cache=tmp / "cache", bisect_on_regression=True, log=print)
        print("night", night + 1, [(x["arm"], x["status"]) for x in res["series"]])
    with Store(results) as store:
        for fmt in ("md", "html"):
            write_report(store, "toy-nightly", fmt=fmt, out=HERE / f"sweep.{fmt}")
        # the morning after the planted night: what the alert looked like
        night5 = [c for c in store.campaigns("sweep") if c.status == "done"][4]
        write_report(store, night5.id, fmt="html", out=HERE / "sweep-alert.html")
        bis = [c for c in store.campaigns("bisect")]
        if bis:
            write_report(store, bis[-1].id, fmt="html", out=HERE / "bisection.html")
    if shots:
        screenshot(HERE / "sweep.html", HERE / "sweep.png")
        screenshot(HERE / "sweep-alert.html", HERE / "sweep-alert.png")
        if (HERE / "bisection.html").exists():
            screenshot(HERE / "bisection.html", HERE / "bisection.png")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--no-screenshots", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (results stores, to re-render)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(args.keep) if args.keep else Path(t)
        tmp.mkdir(parents=True, exist_ok=True)
        if not args.skip_sweep:
            sweep_samples(tmp, not args.no_screenshots)
        if not args.skip_demo:
            demo_samples(tmp / "demo-results", tmp / "demo-cache", not args.no_screenshots)


if __name__ == "__main__":
    main()
