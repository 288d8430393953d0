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


def _demo_attribution(tmp_path, name: str) -> dict:
    p = cli(tmp_path / name, "attribute", "--good", "none", "--bad", "all", "OEA_ENABLE=1", "--json",
            "--max-trials", "150", timeout=900)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    return json.loads(p.stdout)


def _pair_kind(res: dict):
    kinds = {frozenset(i["factors"]): i["kind"] for i in res["interactions"]}
    return kinds.get(frozenset({"oea-topk", "env:OEA_ENABLE"}))


def test_demo_attribution_finds_the_planted_causes(tmp_path):
    """docs/demo.md's ground truth, in full: mla-gather-cast on its own, oea-topk only with
    OEA_ENABLE=1 (an interaction), the no-op and the env-propagation patches cleared.

    Measured rates (simulation of the demo's shape at CV 5%, docs/demo.md): the exact culprit set
    in 99% of runs; the pair also reported as an interaction ("and", or "synergy" when chance
    readings give OEA_ENABLE a small effect of its own) in 94%. So the set is asserted on the
    first run, and a second campaign is allowed only for a run that named the right set but left
    the interaction term out of the final fit (both failing: about 0.4%)."""
    res = _demo_attribution(tmp_path, "first")
    assert res["status"] == "culprits", res
    assert set(res["culprits"]) == {"mla-gather-cast", "oea-topk", "env:OEA_ENABLE"}, res["candidates"]
    if _pair_kind(res) is None:
        res = _demo_attribution(tmp_path, "second")
        assert set(res["culprits"]) == {"mla-gather-cast", "oea-topk", "env:OEA_ENABLE"}, res["candidates"]
    assert _pair_kind(res) in ("and", "synergy"), res["interactions"]
    effects = {e["name"]: e for e in res["effects"]}
    assert effects["mla-gather-cast"]["effect"]["ci_high"] < 0.95      # a clear regression on its own
    posterior = dict(res["candidates"])
    assert posterior["sm120-fixes"] < 0.5 and posterior["nccl-env-propagation"] < 0.5
    by_var = {v["var"]: v for v in res["env_propagation"]["vars"]}
    assert by_var["OEA_ENABLE"]["matched"] == by_var["OEA_ENABLE"]["total"] > 0
