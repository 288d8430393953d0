"""Fingerprints on a real LocalHost; GPUs come from the fake NVML file only."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from bisect_lab import fingerprint as F
from bisect_lab.fingerprint import (REDACTED, Change, Fingerprint, FingerprintCache, collect, diff, format_diff,
                                    redact_env, redact_value)
from bisect_lab.gpu import GpuInspector, GpuSnapshot
from bisect_lab.hosts import LocalHost

GPU = {"name": "NVIDIA H200", "uuid": "GPU-5d0c", "memory_used_mb": 615.0, "memory_total_mb": 143771.0,
       "temperature_c": 37, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "mem_clock_mhz": 3201,
       "power_w": 79.538, "power_limit_w": 700.0, "throttle_reasons": ["gpu_idle"]}


@pytest.fixture
def host():
    return LocalHost()


@pytest.fixture
def fake(tmp_path):
    path = tmp_path / "nvml.json"

    def write(*gpus, **top):
        path.write_text(json.dumps({"driver_version": "570.124.06", "cuda_driver_version": "12.8",
                                    "gpus": [{**GPU, **g} for g in gpus], **top}))
        return path
    return write


def fp(host, cache, insp, **kw):
    args = dict(tree_hash="t1", patch_hashes={"oea-topk": "aa", "mla": "bb"},
                env={"NCCL_PROTO": "LL"}, cache=cache, inspector=insp)
    args.update(kw)
    return collect(host, **args)


# --------------------------------------------------------------------------- redaction
def test_secret_names_are_redacted():
    env = {"HF_TOKEN": "hf_abc", "AWS_SECRET_ACCESS_KEY": "x", "MY_PASSWORD": "p", "DB_PASSWD": "p",
           "GOOGLE_APPLICATION_CREDENTIALS": "/k.json", "HTTP_AUTHORIZATION": "x", "SESSION_COOKIE": "c",
           "OPENAI_API_KEY": "k", "NCCL_PROTO": "LL", "TOKENIZERS_PARALLELISM": "false",
           "NCCL_IB_PKEY": "0x8001", "UNSET_ME": None}
    out = redact_env(env)
    for k in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "MY_PASSWORD", "DB_PASSWD", "GOOGLE_APPLICATION_CREDENTIALS",
              "HTTP_AUTHORIZATION", "SESSION_COOKIE", "OPENAI_API_KEY"):
        assert out[k] == REDACTED, k
    # tuning knobs that merely contain TOKEN/KEY stay visible: they can be the cause
    assert out["NCCL_PROTO"] == "LL" and out["TOKENIZERS_PARALLELISM"] == "false"
    assert out["NCCL_IB_PKEY"] == "0x8001" and out["UNSET_ME"] is None


@pytest.mark.parametrize("secret", [
    "hf_" + "a1B2" * 8, "ghp_" + "x" * 36, "github_pat_11ABCDEFG_" + "y" * 30, "sk-proj-" + "Z9" * 12,
    "AKIA" + "ABCDEFGHIJKLMNOP", "xoxb-1234567890-abcdefghij", "glpat-" + "q" * 20,
])
def test_token_looking_values_are_redacted(secret):
    text = f"--model x --note {secret} tail"
    out = redact_value(text)
    assert secret not in out and REDACTED in out and out.startswith("--model x") and out.endswith("tail")
    assert redact_env({"INNOCENT_NAME": secret})["INNOCENT_NAME"] == REDACTED


def test_url_credentials_and_flags_are_redacted():
    assert (redact_value("https://bob:s3cret@hub.example.com/org/repo.git")
            == f"https://bob:{REDACTED}@hub.example.com/org/repo.git")
    assert redact_value("http://proxy.local:3128") == "http://proxy.local:3128"    # a port is no password
    cmd = "python -m sglang.launch_server --api-key abc123 --tokenizer-path /m --hf-token=zzz"
    out = redact_value(cmd)
    assert "abc123" not in out and "zzz" not in out and "--tokenizer-path /m" in out
    assert redact_value("Authorization: Bearer abcdefghijklmnop") == f"Authorization: Bearer {REDACTED}"


def test_secrets_never_reach_the_fingerprint(host, fake, tmp_path):
    """Env, extra and the command line of a real GPU process (read from /proc) are all redacted."""
    token = "hf_" + "S3cr3tT0k3n" * 3
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--api-key", "plainsecret",
                          "--hf", token])
    try:
        path = fake({"processes": [{"pid": p.pid, "used_memory_mb": 2000}]})
        f = fp(host, FingerprintCache(), GpuInspector(host, fake_nvml=path),
               env={"HF_TOKEN": token, "PIP_INDEX_URL": "https://u:pw123@pypi.corp/simple", "X": token},
               extra={"note": f"pushed with {token}", "api_key": "k"})
    finally:
        p.kill()
        p.wait()
    blob = f.to_json()
    for s in (token, "plainsecret", "pw123"):
        assert s not in blob
    assert f.content["gpu"][0]["processes"][0]["cmdline"].count(REDACTED) == 2
    assert f.content["env"]["PIP_INDEX_URL"] == f"https://u:{REDACTED}@pypi.corp/simple"
    assert f.content["extra"]["api_key"] == REDACTED


# --------------------------------------------------------------------------- content
def test_contents(host, fake):
    path = fake({}, {"sm_clock_mhz": 1410})
    f = fp(host, FingerprintCache(), GpuInspector(host, fake_nvml=path), extra={"seq_len": 4096})
    c = f.content
    assert c["tree"] == {"hash": "t1", "patches": {"mla": "bb", "oea-topk": "aa"}}
    assert c["env"] == {"NCCL_PROTO": "LL"}
    assert c["python"]["version"] == "%d.%d.%d" % sys.version_info[:3]
    import numpy
    assert c["packages"]["numpy"] == numpy.__version__       # read via metadata, not imports
    assert c["host"]["cpu_count"] >= 1 and len(c["host"]["loadavg"]) == 3 and c["host"]["name"]
    assert c["nvidia"]["driver"] == "570.124.06" and c["nvidia"]["cuda_driver"] == "12.8"
    assert c["nvidia"]["gpu"] == "2 GPU(s)" and c["nvidia"]["probe"] == "fake"
    g1 = c["gpu"][1]
    assert g1["model"] == "NVIDIA H200" and g1["clocks"]["sm"] == 1410 and g1["throttle"] == ["gpu_idle"]
    assert g1["power"] == {"draw_w": 79.538, "limit_w": 700}
    assert c["extra"] == {"seq_len": 4096}
    assert f.meta["cold"] is True


def test_no_gpu_fingerprint(host, fake):
    path = fake(error="NVML Shared Library Not Found")
    f = fp(host, FingerprintCache(), GpuInspector(host, fake_nvml=path))
    assert f.content["gpu"] == [] and f.content["nvidia"]["gpu"] == "no GPU: NVML Shared Library Not Found"


def test_content_addressing(host, fake):
    path = fake({})
    snap = GpuInspector(host, fake_nvml=path).probe()
    cache = FingerprintCache()
    a = fp(host, cache, None, gpu=snap)
    b = fp(host, cache, None, gpu=snap, env={"NCCL_PROTO": "LL"}, patch_hashes={"mla": "bb", "oea-topk": "aa"})
    # Same inputs -> same configuration id; the full id differs only if the load moved in between.
    assert a.stable_id == b.stable_id
    assert (a.id == b.id) == (a.content["host"]["loadavg"] == b.content["host"]["loadavg"])
    same = Fingerprint(json.loads(json.dumps(a.content)))
    assert same.id == a.id and Fingerprint.from_dict(a.to_dict()).id == a.id
    c = fp(host, cache, None, gpu=snap, patch_hashes={"oea-topk": "aa", "mla": "cc"})
    assert c.stable_id != a.stable_id and c.id != a.id
    hot = fp(host, cache, GpuInspector(host, fake_nvml=fake({"temperature_c": 80})))
    assert hot.stable_id == a.stable_id and hot.id != a.id   # a reading, not a configuration change
    assert len(a.id) == 64 and int(a.id, 16) >= 0
    with pytest.raises(ValueError, match="does not match"):
        Fingerprint.from_dict({**a.to_dict(), "tree": {"hash": "tampered"}})


# --------------------------------------------------------------------------- diff
def test_diff_is_readable_and_skips_volatile(host, fake):
    cache = FingerprintCache()
    a = fp(host, cache, GpuInspector(host, fake_nvml=fake({})))
    time.sleep(0.01)
    b = fp(host, cache, GpuInspector(host, fake_nvml=fake({"sm_clock_mhz": 1410, "temperature_c": 83,
                                                          "throttle_reasons": ["sw_power_cap"]})),
           env={"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring"}, patch_hashes={"oea-topk": "aa"})
    da, db = a.to_dict(), b.to_dict()
    db["host"]["loadavg"] = da["host"]["loadavg"]      # the load is a reading that may move; pin it here
    lines = [str(c) for c in diff(da, db)]
    assert lines == [
        "env.NCCL_ALGO: <absent> -> Ring",
        "env.NCCL_PROTO: LL -> Simple",
        "gpu.0.clocks.sm: 1980 -> 1410",
        "gpu.0.temperature_c: 37 -> 83",
        "gpu.0.throttle: [gpu_idle] -> [sw_power_cap]",
        "tree.patches.mla: bb -> <absent>",
    ]
    assert diff(a, a) == [] and format_diff([]) == "no differences"
    assert any(c.path == "taken_at" for c in diff(da, db, include_volatile=True))
    assert [c.path for c in diff(da, db, ignore=["gpu.*", "env.*"])] == ["tree.patches.mla"]
    assert Change("x.y", 1, F.ABSENT).__str__() == "x.y: 1 -> <absent>"


def test_diff_recurses_into_lists_of_dicts():
    a = {"gpu": [{"clocks": {"sm": 1980}}], "host": {"loadavg": [0.5, 0.4, 0.3]}}
    b = {"gpu": [{"clocks": {"sm": 1980}}, {"clocks": {"sm": 1755}}], "host": {"loadavg": [3.0, 0.4, 0.3]}}
    out = [str(c) for c in diff(a, b)]
    assert out == ['gpu.1: <absent> -> {"clocks": {"sm": 1755}}', "host.loadavg: [0.5, 0.4, 0.3] -> [3, 0.4, 0.3]"]


# --------------------------------------------------------------------------- cost
def test_cache_makes_the_next_fingerprint_cheap(host, fake):
    path = fake({})
    cache = FingerprintCache()
    insp = GpuInspector(host, fake_nvml=path)
    cold = fp(host, cache, insp)
    warm = [fp(host, cache, insp) for _ in range(5)]
    assert cold.meta["cold"] and cold.meta["host_calls"] == 1
    assert all(not w.meta["cold"] and w.meta["host_calls"] == 0 for w in warm)   # local: in-process
    # What makes it cheap is the number of host round trips, asserted above and below; the
    # seconds themselves are benchmarks/fingerprint_overhead.py's to show (a loaded CI machine
    # made a wall-clock bound here flaky).
    assert {w.stable_id for w in warm} == {cold.stable_id}
    # Through host.python (the SSH path): one round trip per warm fingerprint, static facts cached.
    remote = GpuInspector(host, fake_nvml=path, in_process=False)
    cache2 = FingerprintCache()
    c2 = fp(host, cache2, remote)
    w2 = fp(host, cache2, remote)
    assert c2.meta["host_calls"] == 1 and w2.meta["host_calls"] == 1 and not w2.meta["cold"]
    assert w2.stable_id == cold.stable_id            # same facts whichever way they were read
    # Expiry: an old entry is taken again.
    cache3 = FingerprintCache(max_age_s=0.0)
    fp(host, cache3, insp)
    time.sleep(0.01)
    assert fp(host, cache3, insp).meta["cold"] is True


def test_gpu_after_is_kept(host, fake):
    snap_after = GpuInspector(host, fake_nvml=fake({"sm_clock_mhz": 1755, "throttle_reasons": ["sw_power_cap"]})).probe()
    f = fp(host, FingerprintCache(), GpuInspector(host, fake_nvml=fake({})), gpu_after=snap_after)
    assert f.content["gpu_after"][0]["throttle"] == ["sw_power_cap"]
    assert f.content["gpu"][0]["throttle"] == ["gpu_idle"]


pytest_plugins = ["sshd_fixture"]


@pytest.mark.ssh
def test_fingerprint_through_ssh(request, host, fake):
    """Over SSH: one round trip when warm, and the same machine gives the same configuration id."""
    from bisect_lab.hosts import SSHHost
    sshd = request.getfixturevalue("sshd")
    path = fake({})
    with SSHHost(sshd.target, port=sshd.port, key=sshd.key_path, known_hosts=sshd.known_hosts_path,
                 connect_timeout_s=5, python_exe=sys.executable) as ssh:
        cache = FingerprintCache()
        insp = GpuInspector(ssh, fake_nvml=path)
        cold = fp(ssh, cache, insp)
        warm = fp(ssh, cache, insp)
    assert cold.meta == {**cold.meta, "cold": True, "host_calls": 1}
    assert warm.meta["cold"] is False and warm.meta["host_calls"] == 1
    local = fp(host, FingerprintCache(), GpuInspector(host, fake_nvml=path))
    assert diff(local, warm, ignore=list(F.READINGS)) == []
    assert local.stable_id == warm.stable_id


def test_flags_from_stored_fingerprints(host, fake):
    """The store keeps fingerprint dicts: flags can be computed from them alone."""
    cache = FingerprintCache()
    idle = GpuInspector(host, fake_nvml=fake({})).probe()
    stored = {}
    for t in range(4):
        load = GpuInspector(host, fake_nvml=fake({"sm_clock_mhz": 1980, "throttle_reasons": []})).probe()
        stored[t] = fp(host, cache, None, gpu=idle, gpu_after=load).to_dict()
    hot = GpuInspector(host, fake_nvml=fake({"sm_clock_mhz": 1500, "temperature_c": 87,
                                             "throttle_reasons": ["hw_thermal"]})).probe()
    stored[4] = json.loads(fp(host, cache, None, gpu=idle, gpu_after=hot).to_json())   # as read back
    snaps = F.gpu_snapshots(stored[4])
    assert set(snaps) == {"before", "after"} and snaps["after"].gpus[0].perf_throttle == ("hw_thermal",)
    res = F.flag_fingerprints(stored)
    assert res.flagged() == [4] and res.flags[4] == ("clock-differs", "throttled")
