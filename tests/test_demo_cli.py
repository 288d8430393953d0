"""The README's first command and the demo's ground truth, through the real CLI on CPU."""
import json

import pytest

from test_cli_run import cli

pytestmark = pytest.mark.slow


def test_bundled_demo_run_with_no_experiment(tmp_path):
    p = cli(tmp_path, "run", "--repeat", "3", "--json", timeout=400)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    arms = {a["arm"]: a for a in res["arms"]}
    assert set(arms) == {"all", "none"} and all(a["n"] == 3 for a in arms.values())
    (c,) = res["comparisons"]
    # Planted: mla-gather-cast sends verify down the extend path, about -20..-30% (docs/demo.md).
    slower = c["ratio"] if c["a"] == "none" else 1 / c["ratio"]
    assert slower < 0.92, c


def test_demo_attribution_finds_the_planted_causes(tmp_path):
    p = cli(tmp_path, "attribute", "--good", "none", "--bad", "all", "OEA_ENABLE=1", "--json",
            "--max-trials", "120", timeout=900)
    assert p.returncode in (0, 3), p.stderr
    res = json.loads(p.stdout)
    if res["status"] == "inconclusive":          # budget spent by the noise: the lead must still be right
        assert res["candidates"][0][0] == "mla-gather-cast", res["candidates"]
        return
    assert res["status"] == "culprits", res
    culprits = set(res["culprits"])
    # The planted cause is always found. The exact planted set (plus oea-topk and OEA_ENABLE) came out
    # in 24 of 27 local runs on a loaded 2-core machine (docs/demo.md), not reliably enough for CI: the
    # staged residual check sometimes clears the pair (issue 6 stays open for it), so this CI check
    # holds the line on the main cause.
    assert "mla-gather-cast" in culprits
    assert len(culprits) <= 4
    by_var = {v["var"]: v for v in res["env_propagation"]["vars"]}
    assert by_var["OEA_ENABLE"]["matched"] == by_var["OEA_ENABLE"]["total"] > 0
