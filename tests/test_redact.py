"""The redaction policy (bisect_lab/redact.py) and the sinks that apply it, in process: names,
free text, identity tags, the results folder's key, the store's last line of defence, reports."""
import hashlib
import hmac
import os
import sqlite3
import threading

import pytest

from bisect_lab import redact
from bisect_lab.arms import parse_arm
from bisect_lab.errors import UsageError
from bisect_lab.matrix import expand
from bisect_lab.model import TrialResult, TrialStatus
from bisect_lab.redact import REDACTED, is_secret_name, redact_text, redact_tree
from bisect_lab.store import KEY_NAME, Store, load_or_create_key


@pytest.fixture(autouse=True)
def key():
    redact.use_key(b"k" * 32)
    yield b"k" * 32
    redact.use_key(None)


# --------------------------------------------------------------------------- names
@pytest.mark.parametrize("name", [
    "HF_TOKEN", "GITHUB_TOKEN", "TOKEN", "API_KEY", "OPENAI_API_KEY", "KEY", "SSH_KEY", "AWS_SECRET_ACCESS_KEY",
    "MY_PASSWORD", "DB_PASSWD", "DB_PASS", "MYSQL_PWD", "HFTOKEN", "OPENAIAPIKEY", "CLIENTSECRET", "apiKey",
    "hfToken", "--hf-token", "--api-key", "--password", "GOOGLE_APPLICATION_CREDENTIALS", "HTTP_AUTHORIZATION",
    "SESSION_COOKIE", "auth"])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    # tuning knobs that merely contain the letters stay visible: hiding them would hide a cause
    "NCCL_IB_PKEY", "MAX_TOKENS", "SGLANG_MAX_NEW_TOKENS", "TOKENIZERS_PARALLELISM", "PWD", "OLDPWD",
    "MONKEY_PATCH", "KEYBOARD", "AUTHOR", "NCCL_PROTO", "--tokenizer-path", "output_tokens", "PASSES"])
def test_names_that_are_not_secret(name):
    assert not is_secret_name(name)


# --------------------------------------------------------------------------- free text
@pytest.mark.parametrize("text, secret", [
    ("env: HF_TOKEN=hf_short1 NCCL_PROTO=LL", "hf_short1"),
    ("export MY_PASSWORD='two words'", "two words"),
    ('{"api_key": "k-123456", "n": 1}', "k-123456"),
    ("{'hfToken': 'abc987'}", "abc987"),
    ("HF_TOKEN: hf_colon9", "hf_colon9"),
    ("launch --api-key plainsecret --port 30000", "plainsecret"),
    ("launch --hf-token=zzz9 --tp 2", "zzz9"),
    ('launch --password "quoted secret" --tp 2', "quoted secret"),
    ("clone http://alice:urlpass42@127.0.0.1:8000/r.git", "urlpass42"),
    ("Authorization: Bearer abcdefghijklmnop", "abcdefghijklmnop"),
    ("Authorization: Basic YWxpY2U6cHcxMjM0NQ==", "YWxpY2U6cHcxMjM0NQ=="),
    ("pushed with ghp_" + "x" * 36, "ghp_" + "x" * 36),
    ("key id AKIAABCDEFGHIJKLMNOP in the log", "AKIAABCDEFGHIJKLMNOP"),
    ("slack xoxb-1234567890-abcdefghij ok", "xoxb-1234567890-abcdefghij"),
    ("test_x[all-HF_TOKEN=hf_in_an_id]", "hf_in_an_id"),
])
def test_secrets_in_text_are_hidden(text, secret):
    out = redact_text(text)
    assert secret not in out and REDACTED in out, out
    assert redact_text(out) == out                    # idempotent: a sink may see text twice


@pytest.mark.parametrize("text", [
    "Output token throughput (tok/s):          70.12",
    "basic benchmark results follow",
    "launch --no-auth --port 30000 --tokenizer-path /m",
    "MAX_TOKENS=4096 NCCL_PROTO=LL TOKENIZERS_PARALLELISM=false",
    "http://proxy.local:3128/simple",
    "all HF_TOKEN=<redacted:3f2a1b9c>",              # a tag is kept: it is the arm's identity
    "tests/test_perf.py::test_arm[all-HF_TOKEN=redacted-3f2a1b9c]",    # so is a tag in a test id
    "│ HF_TOKEN=<red │ HF_TOKEN=<redacted:3f │ HF_TOKEN=<redacted:49… │",   # and a tag a table folded
])
def test_text_without_secrets_is_left_alone(text):
    assert redact_text(text) == text


def test_a_remembered_value_is_hidden_wherever_it_appears():
    redact.remember("correct-horse-battery")
    assert redact_text("echo correct-horse-battery > /dev/null") == f"echo {REDACTED} > /dev/null"
    redact.remember("abc")                            # too short to hide everywhere; hidden by name only
    assert redact_text("abc def") == "abc def"


def test_trees_keep_their_keys_and_lose_secret_values():
    out = redact_tree({"env": {"API_KEY": "k1", "N": "1"}, "cmd": ["x", "--api-key", "sk-" + "a" * 20],
                       "metrics": {"output_tokens": 5}, "arm": "all HF_TOKEN=<redacted:3f2a1b9c>"})
    assert out == {"env": {"API_KEY": REDACTED, "N": "1"}, "cmd": ["x", "--api-key", REDACTED],
                   "metrics": {"output_tokens": 5}, "arm": "all HF_TOKEN=<redacted:3f2a1b9c>"}


# --------------------------------------------------------------------------- identity tags
def test_arm_specs_carry_a_keyed_tag_and_the_arm_keeps_the_value(key):
    a, b = parse_arm("all HF_TOKEN=hf_aaa1 X=1", None), parse_arm("all HF_TOKEN=hf_bbb2 X=1", None)
    expected = hmac.new(key, b"HF_TOKEN=hf_aaa1", hashlib.sha256).hexdigest()[:8]
    assert a.spec == f"none HF_TOKEN=<redacted:{expected}> X=1"
    assert a != b and a.spec != b.spec                # two tokens, two arms
    assert a.env_dict["HF_TOKEN"] == "hf_aaa1"        # what the benchmark gets
    assert parse_arm(a.spec, None) == a and parse_arm(a.spec, None).env == a.env   # round trip in-process
    # A secret-looking value under an innocent name is tagged as well.
    assert "sk-" not in parse_arm("none OPTS=--key=sk-" + "z" * 20, None).spec


def test_attribution_arms_built_from_factors_carry_the_same_tag():
    from bisect_lab.arms import arm_for_active, factors_between
    good, bad = parse_arm("none", None), parse_arm("none HF_TOKEN=hf_factor1 X=2", None)
    assert factors_between(good, bad) == ["env:HF_TOKEN", "env:X"]
    mid = arm_for_active(good, bad, frozenset({"env:HF_TOKEN"}), None)
    assert mid.spec == bad.spec.replace(" X=2", "") and mid.env_dict == {"HF_TOKEN": "hf_factor1"}
    assert arm_for_active(good, bad, frozenset({"env:HF_TOKEN", "env:X"}), None) == bad


def test_another_results_folder_gives_another_tag_and_an_unknown_tag_is_refused():
    spec = parse_arm("none HF_TOKEN=hunter2", None).spec
    redact.use_key(b"other" * 8)
    assert parse_arm("none HF_TOKEN=hunter2", None).spec != spec     # no shared hash to test guesses on
    with pytest.raises(UsageError, match="is a redacted value: give the real one"):
        parse_arm("none HF_TOKEN=<redacted:00000000>", None)
    with pytest.raises(UsageError, match="is a redacted value"):
        parse_arm("none HF_TOKEN=<redacted>", None)


def test_matrix_ids_show_the_tag_never_the_value():
    cases = expand(["a"], patches=["all"], env={"HF_TOKEN": ["hf_m1x", "hf_m2y"]})
    assert len({c.spec for c in cases}) == 2
    for c in cases:
        assert "hf_m" not in c.spec + c.id and "HF_TOKEN=redacted-" in c.id
    assert {parse_arm(c.spec, None).env_dict["HF_TOKEN"] for c in cases} == {"hf_m1x", "hf_m2y"}


# --------------------------------------------------------------------------- the key
def test_the_key_file_is_private_stable_and_created_once(tmp_path):
    keys = []
    threads = [threading.Thread(target=lambda: keys.append(load_or_create_key(tmp_path))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(keys)) == 1 and len(keys[0]) == 32
    assert (tmp_path / KEY_NAME).stat().st_mode & 0o077 == 0
    assert Store(tmp_path).redaction_key() == keys[0]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []   # no temp file left


def test_a_store_opened_for_reading_creates_no_key(tmp_path):
    Store(tmp_path).close()
    Store(tmp_path, create=False).close()
    assert not (tmp_path / KEY_NAME).exists()


# --------------------------------------------------------------------------- sinks in process
def test_the_store_redacts_whatever_a_caller_forgot(tmp_path):
    s = Store(tmp_path)
    cid = s.create_campaign("run", experiment="e", experiment_name="e",
                            params={"command": "bench --api-key plainsecret1", "env": {"API_KEY": "k-in-params"}})
    arm = parse_arm("all HF_TOKEN=hf_tok_in_arm", None).spec
    s.add_trial(TrialResult(cid, 0, arm, TrialStatus.CRASHED, "local", 1.0, 1.0,
                            error="exit 3: login failed for HF_TOKEN=hf_tok_in_error",
                            env_report={"processes": [[1, "srv --password pw_in_report"]]}),
                extra={"stdout_tail": "MY_PASSWORD=pw_in_tail", "killed": [{"cmdline": "x --token tk_in_killed"}]})
    s.finish_campaign(cid, "done", {"note": "Authorization: Bearer bearer_in_result_123"})
    s.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("bisect-lab.sqlite"))
    for secret in ("plainsecret1", "k-in-params", "hf_tok_in_arm", "hf_tok_in_error", "pw_in_report",
                   "pw_in_tail", "tk_in_killed", "bearer_in_result_123"):
        assert secret.encode() not in raw, secret
    assert [t.arm for t in Store(tmp_path).trials(cid)] == [arm]       # the identity is stored as it is


def test_a_report_of_an_older_database_hides_its_secrets(tmp_path):
    from bisect_lab.report import build_report, to_html, to_markdown
    s = Store(tmp_path)
    cid = s.create_campaign("run", experiment="e", experiment_name="e", params={"arms": ["all"]})
    s.add_trial(TrialResult(cid, 0, "all", TrialStatus.CRASHED, "local", 1.0, 1.0, error="boom"))
    s.finish_campaign(cid, "done", {})
    s.close()
    # What a bisect-lab without the policy wrote: the secret in the error column itself.
    with sqlite3.connect(tmp_path / "bisect-lab.sqlite") as db:
        db.execute("UPDATE trials SET error=?", ("exit 3: HF_TOKEN=hf_old_db_secret refused",))
    rep = build_report(Store(tmp_path, create=False), cid)
    md, page = to_markdown(rep), to_html(rep)
    assert "refused" in md and "hf_old_db_secret" not in md and "hf_old_db_secret" not in page
