"""Patch-set manifests (docs/contracts.md, Patch-set manifest) and arm specs (docs/contracts.md, Arm specs)."""
import textwrap

import pytest

from bisect_lab.arms import arm_for_active, canonical_spec, factors_between, parse_arm
from bisect_lab.errors import ConfigError, UsageError
from bisect_lab.patchset import load_patchset


def _diff(path):
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1,2 @@\n-a\n+b\n+c\n"


def make_set(tmp_path, manifest: str, files=("a", "b", "c", "e")):
    for n in files:
        (tmp_path / f"{n}.patch").write_text(_diff(f"src/{n}.py"))
    (tmp_path / "patchset.toml").write_text(textwrap.dedent(manifest))
    return tmp_path


STORY = """
[[patch]]
name = "oea-topk"
aliases = ["topk", "oea"]
file = "a.patch"
description = "env-gated"
[[patch]]
name = "mla"
file = "b.patch"
[[patch]]
name = "nccl"
aliases = ["nccl-env"]
file = "c.patch"
requires = ["mla"]
[[patch]]
name = "eagle"
file = "e.patch"
required = true
"""


@pytest.fixture
def ps(tmp_path):
    return load_patchset(make_set(tmp_path, STORY))


def test_manifest_loads_with_diff_stats(ps):
    assert ps.names == ("oea-topk", "mla", "nccl", "eagle")
    p = ps.get("oea-topk")
    assert p.aliases == ("topk", "oea") and p.files == ("src/a.py",) and (p.added, p.removed) == (2, 1)
    assert ps.required == {"eagle"}
    assert len(p.sha256) == 64


@pytest.mark.parametrize("manifest, key, words", [
    ('[[patch]]\nname="A"\nfile="a.patch"\n', "patch[0].name", "[a-z0-9-]"),
    ('[[patch]]\nname="a"\nfile="zz.patch"\n', "patch.a.file", "does not exist"),
    ('[[patch]]\nname="a"\nfile="a.patch"\n[[patch]]\nname="b"\naliases=["a"]\nfile="b.patch"\n', "patch.b", "already used"),
    ('[[patch]]\nname="a"\nfile="a.patch"\nrequires=["q"]\n', "patch.a.requires", "unknown patch 'q'"),
    ('[[patch]]\nname="a"\nfile="a.patch"\nrequires=["b"]\n[[patch]]\nname="b"\nfile="b.patch"\nrequires=["a"]\n', "requires", "cycle"),
    ('[[patch]]\nname="a"\nfile="a.patch"\nrequired="yes"\n', "patch.a.required", "true or false"),
    ('[[patch]]\nname="a"\nfile="a.patch"\ncolour=1\n', "patch[0]", "unknown keys"),
    ('[[patch]\nname="a"', None, "malformed TOML"),
])
def test_manifest_errors_name_file_and_key(tmp_path, manifest, key, words):
    make_set(tmp_path, manifest)
    with pytest.raises(ConfigError) as e:
        load_patchset(tmp_path)
    msg = str(e.value)
    assert "patchset.toml" in msg and words in msg
    if key:
        assert key in msg


def test_not_a_diff_is_rejected(tmp_path):
    make_set(tmp_path, '[[patch]]\nname="a"\nfile="a.patch"\n')
    (tmp_path / "a.patch").write_text("hello\n")
    with pytest.raises(ConfigError, match="not a unified diff"):
        load_patchset(tmp_path)


@pytest.mark.parametrize("spec, canonical, patches", [
    ("all", "all", {"oea-topk", "mla", "nccl", "eagle"}),
    ("none", "none", {"eagle"}),
    ("all-minus topk", "all-minus oea-topk", {"mla", "nccl", "eagle"}),
    ("all-minus topk,nccl-env", "only mla", {"mla", "eagle"}),
    ("only topk NCCL_PROTO=LL X=", "only oea-topk NCCL_PROTO=LL X=", {"oea-topk", "eagle"}),
    ("none-plus nccl", "all-minus oea-topk", {"mla", "nccl", "eagle"}),   # requires pulls in mla
    ("all  B=2 A='x y'", "all A='x y' B=2", {"oea-topk", "mla", "nccl", "eagle"}),
])
def test_arm_specs_resolve_and_canonicalise(ps, spec, canonical, patches):
    arm = parse_arm(spec, ps)
    assert arm.spec == canonical
    assert arm.patches == patches
    assert parse_arm(arm.spec, ps) == arm            # canonical text round-trips
    assert canonical_spec(canonical, ps) == canonical


@pytest.mark.parametrize("spec, words", [
    ("all-minus eagle", "cannot remove required patch eagle"),
    ("all-minus mla", "nccl requires it"),
    ("only zzz", "valid names (aliases): oea-topk (topk, oea), mla, nccl (nccl-env), eagle"),
    ("most", "must start with one of"),
    ("all X", "expected VAR=value"),
    ("all A=1 A=2", "given twice"),
    ("only", "needs a comma-separated list"),
    ("all 'unclosed", "bad arm spec"),
])
def test_arm_spec_errors_are_usage_errors(ps, spec, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_arm(spec, ps)


def test_factors_and_intermediate_arms(ps):
    good, bad = parse_arm("none", ps), parse_arm("all OEA_ENABLE=1", ps)
    f = factors_between(good, bad)
    assert f == ["mla", "nccl", "oea-topk", "env:OEA_ENABLE"]
    assert arm_for_active(good, bad, frozenset(), ps) == good
    assert arm_for_active(good, bad, frozenset(f), ps) == bad
    mid = arm_for_active(good, bad, frozenset({"oea-topk", "env:OEA_ENABLE"}), ps)
    assert mid.spec == "only oea-topk OEA_ENABLE=1"
    # An env var the bad arm leaves to the environment is unset-by-omission in the intermediate arm.
    g2, b2 = parse_arm("all NCCL_ALGO=Ring", ps), parse_arm("all", ps)
    assert factors_between(g2, b2) == ["env:NCCL_ALGO"]
    assert arm_for_active(g2, b2, frozenset({"env:NCCL_ALGO"}), ps).spec == "all"


def test_arms_without_patch_set():
    assert parse_arm("all FOO=1", None).spec == "none FOO=1"
    with pytest.raises(UsageError, match="no patch set"):
        parse_arm("only topk", None)
