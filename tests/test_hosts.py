"""The Host contract, run against both hosts: the local machine and a real sshd on
127.0.0.1 (tests/sshd_fixture.py). Real processes, no mocks: the SSH host's remote
processes live on this same machine, so psutil can check that nothing survives.
"""
from __future__ import annotations

import os
import random
import signal
import socket
import stat
import threading
import time
from pathlib import Path

import psutil
import pytest

from bisect_lab.errors import EXIT_NO_MEASUREMENT, HostError
from bisect_lab.hosts import (CommandResult, HostCommandError, LocalHost, SSHHost, make_hosts)
from bisect_lab.model import HostConfig

# Works without the conftest line too; registering a plugin twice is a no-op.
pytest_plugins = ["sshd_fixture"]


# ----------------------------------------------------------------------------- helpers
def marker() -> str:
    """A unique fractional sleep length: `sleep 300.<marker>` is findable by cmdline."""
    return f"{random.randrange(10**8, 10**9)}"


def alive_with(mark: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose command line mentions ``mark``."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if mark in " ".join(p.info["cmdline"] or ()):
                found.append(p)
        except psutil.Error:
            pass
    return found


def sleeps(mark: str) -> list[psutil.Process]:
    """The `sleep <n>.<mark>` processes themselves (not the shells that mention them)."""
    return [p for p in alive_with(mark) if p.info["cmdline"] and p.info["cmdline"][0].endswith("sleep")]


def wait_until(pred, timeout_s: float = 10.0, step: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def no_survivors(mark: str) -> list[psutil.Process]:
    """Processes mentioning ``mark`` still alive after a short grace period ([] is good)."""
    # SIGKILL is asynchronous: give the kernel a moment before calling it a survivor.
    wait_until(lambda: not alive_with(mark), 3.0)
    return alive_with(mark)


def ssh_host(sshd, **kw) -> SSHHost:
    kw.setdefault("port", sshd.port)
    kw.setdefault("key", sshd.key_path)
    kw.setdefault("known_hosts", sshd.known_hosts_path)
    kw.setdefault("connect_timeout_s", 5)
    return SSHHost(kw.pop("target", sshd.target), **kw)


@pytest.fixture(params=["local", "ssh"])
def host(request, tmp_path):
    if request.param == "local":
        h = LocalHost(cache_dir=tmp_path / "cache")
    else:
        h = ssh_host(request.getfixturevalue("sshd"), workdir=str(tmp_path / "remote cache"))
    try:
        yield h
    finally:
        h.close()


# ----------------------------------------------------------------------------- both hosts
def test_run_output_and_exit_codes(host):
    r = host.run("echo out; echo err >&2; exit 3", timeout_s=20)
    assert isinstance(r, CommandResult)
    assert (r.returncode, r.stdout, r.stderr, r.timed_out, r.ok) == (3, "out\n", "err\n", False, False)
    assert r.host == host.name
    with pytest.raises(HostCommandError, match="exit 3: err"):
        r.check("the step")
    ok = host.run(["printf", "%s|", "a b", "it's", "$HOME", "`x`"], timeout_s=20)
    assert ok.ok and ok.stdout == "a b|it's|$HOME|`x`|"
    killed = host.run("kill -9 $$", timeout_s=20)
    assert killed.returncode == 128 + 9
    # a command that printed nothing: no dangling colon; a signal is named
    with pytest.raises(HostCommandError) as e:
        killed.check("the step")
    said = f"the step failed on {host.name}: exit 137 (killed by SIGKILL (signal 9; often the out-of-memory killer))"
    # (over SSH the remote login shell reports the kill on stderr: that line is output)
    assert str(e.value) == said if host.is_local else str(e.value).startswith(said + ": ")


def test_stdin_input_and_eof(host):
    assert host.run("cat", timeout_s=20, input="line 1\nline 2\n").stdout == "line 1\nline 2\n"
    t0 = time.monotonic()
    r = host.run("cat; echo done", timeout_s=20)       # no input: EOF at once, never a hang
    assert r.stdout == "done\n" and time.monotonic() - t0 < 10


def test_timeout_kills_whole_tree(host):
    m = marker()
    # A child that ignores SIGTERM, one that left the session, and the shell itself.
    cmd = (f"bash -c 'trap \"\" TERM; sleep 300.{m}' & setsid sleep 301.{m} & "
           f"echo started; sleep 302.{m}; wait")
    t0 = time.monotonic()
    r = host.run(cmd, timeout_s=1.5)
    elapsed = time.monotonic() - t0
    assert r.timed_out and r.returncode is None and not r.ok
    assert 1.4 < elapsed < 8, elapsed
    assert "started" in r.stdout
    assert no_survivors(m) == []


def test_keyboard_interrupt_kills_tree(host):
    m = marker()
    # Ctrl-C is what this simulates; a test run started in the background by a non-interactive
    # shell inherits SIGINT ignored, and Python then never raises KeyboardInterrupt
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            host.run(f"sleep 300.{m} & sleep 301.{m}; wait", timeout_s=30)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert no_survivors(m) == []


def test_env_overlay_set_unset_and_quoting(host):
    nasty = "a b  'single' \"double\" $HOME ${X} `date` \\ ; | & * \n second line"
    r = host.run('printf "%s" "$BL_NASTY"; printf "|%s|%s" "${HOME-unset}" "$BL_PLAIN"',
                 timeout_s=20, env={"BL_NASTY": nasty, "HOME": None, "BL_PLAIN": "x=y"})
    assert r.ok, r.stderr
    assert r.stdout == nasty + "|unset|x=y"
    # A list command gets the overlay too.
    assert host.run(["printenv", "BL_PLAIN"], timeout_s=20, env={"BL_PLAIN": "v w"}).stdout == "v w\n"
    with pytest.raises(HostError, match="invalid environment variable name"):
        host.run("true", timeout_s=20, env={"BAD NAME; rm -rf x": "1"})


def test_cwd_with_spaces_and_quotes(host, tmp_path):
    d = tmp_path / "dir with spaces 'q' $x"
    d.mkdir()
    r = host.run("pwd -P; ls", timeout_s=20, cwd=str(d))
    assert r.ok and r.stdout == f"{d.resolve()}\n"
    with pytest.raises(HostError, match="no such directory"):
        host.run("true", timeout_s=20, cwd=str(tmp_path / "missing dir"))
    proc = host.spawn("pwd -P", cwd=str(d))
    assert proc.wait(20) == 0 and proc.output() == (f"{d.resolve()}\n", "")
    proc.close()
    with pytest.raises(HostError, match="no such directory"):
        host.spawn("true", cwd=str(tmp_path / "missing dir"))


def test_spawn_poll_output_descendants_kill(host, tmp_path):
    m = marker()
    p = host.spawn(f"echo started; echo warn >&2; bash -c 'trap \"\" TERM; sleep 300.{m}' & "
                   f"setsid sleep 301.{m} & sleep 302.{m}; wait",
                   env={"BL_SPAWNED": "yes it is"}, cwd=str(tmp_path))
    assert p.poll() is None
    assert p.wait(0.2) is None
    assert wait_until(lambda: len(sleeps(m)) == 3)
    # The root leads its own session; its tree holds every worker.
    assert os.getsid(p.pid) == p.pid
    tree = wait_until(lambda: (lambda t: t if len(t) >= 4 else None)(p.descendants()))
    assert tree and tree[0] == p.pid
    workers = {q.pid for q in sleeps(m)}
    assert workers <= set(tree)
    # The env overlay reached every process of the tree.
    for pid in tree:
        assert psutil.Process(pid).environ().get("BL_SPAWNED") == "yes it is"
    assert wait_until(lambda: p.output()[0] == "started\n")
    assert p.output()[1] == "warn\n"
    killed = p.kill_tree()
    assert workers <= {k.pid for k in killed}
    assert any(f"sleep 300.{m}" in k.cmdline for k in killed)
    assert p.poll() == 128 + 9
    assert no_survivors(m) == []
    assert p.descendants() == []
    p.close()


def test_spawn_exit_code_and_close(host):
    p = host.spawn("echo hi; echo oops >&2; exit 5")
    assert p.wait(20) == 5
    assert p.poll() == 5
    assert p.output() == ("hi\n", "oops\n")
    assert p.kill_tree() == []       # nothing left; the reaped pid is never killed
    p.close()
    assert p.output() == ("", "")


def test_read_write_bytes(host, tmp_path):
    path = tmp_path / "new dir" / "sub" / "f 'x'.bin"
    data = bytes(range(256)) * 4096 + b"\0tail"
    host.write_bytes(str(path), data)
    assert path.read_bytes() == data
    assert host.read_bytes(str(path)) == data
    assert host.exists(str(path)) and not host.exists(str(tmp_path / "nope"))
    os.chmod(path, 0o751)
    host.write_bytes(str(path), b"second")
    assert path.read_bytes() == b"second"
    assert stat.S_IMODE(path.stat().st_mode) == 0o751          # replacing keeps the mode
    assert sorted(os.listdir(path.parent)) == ["f 'x'.bin"]      # no temp file left
    with pytest.raises(FileNotFoundError):
        host.read_bytes(str(tmp_path / "missing.bin"))


def test_cache_root(host, tmp_path):
    root = host.cache_root()
    assert os.path.isabs(root) and os.path.isdir(root)
    assert host.cache_root() == root
    assert Path(root).resolve().parent == tmp_path.resolve()


def test_python_probe(host):
    r = host.python("import sys; print(sys.argv[1])", "a b $c", timeout_s=30)
    assert r.ok and r.stdout == "a b $c\n"


# ----------------------------------------------------------------------------- SSH only
def test_ssh_connection_is_reused(sshd):
    with ssh_host(sshd) as h:
        h.run("true", timeout_s=20)
        first = h.connection.current
        for _ in range(3):
            h.run("true", timeout_s=20)
        assert h.connection.current is first and first.is_connected


def test_ssh_reconnects_after_server_drops_connection(sshd):
    with ssh_host(sshd) as h:
        assert h.run("echo one", timeout_s=20).stdout == "one\n"
        first = h.connection.current
        assert sshd.drop_connections() >= 1
        assert wait_until(lambda: not first.is_connected, 5)
        assert h.run("echo two", timeout_s=20).stdout == "two\n"
        assert h.connection.current is not first
        assert h.read_bytes(sshd.known_hosts_path).startswith(b"[127.0.0.1]")


def test_ssh_connection_lost_mid_command_is_host_error(sshd):
    m = marker()
    with ssh_host(sshd) as h:
        h.connect()
        threading.Timer(1.0, sshd.drop_connections).start()
        with pytest.raises(HostError, match="connection lost"):
            h.run(f"sleep 30.{m}", timeout_s=20)
        # It had started, so it was not run again; and it was killed after reconnecting.
        assert no_survivors(m) == []


def test_ssh_unknown_host_key(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(HostError) as e:
        ssh_host(sshd, known_hosts=str(empty)).run("true", timeout_s=20)
    msg = str(e.value)
    assert e.value.exit_code == EXIT_NO_MEASUREMENT == 4
    assert "\n" not in msg and "unknown SSH host key" in msg
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {empty}" in msg
    assert "accept_unknown_host = true" in msg
    # Accepting trusts the key for this process only: known_hosts stays untouched.
    with ssh_host(sshd, known_hosts=str(empty), accept_unknown_host=True) as h:
        assert h.run("echo ok", timeout_s=20).stdout == "ok\n"
    assert empty.read_text() == ""


def test_ssh_unknown_host_key_default_message(sshd, tmp_path, monkeypatch):
    # No known_hosts given: the hint names the user's file, as ssh would.
    monkeypatch.delenv("BISECT_LAB_KNOWN_HOSTS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))          # an empty ~/.ssh
    h = SSHHost(sshd.target, port=sshd.port, key=sshd.key_path, connect_timeout_s=5)
    with pytest.raises(HostError, match=r">> ~/\.ssh/known_hosts` .*accept_unknown_host = true"):
        h.run("true", timeout_s=20)


def test_ssh_host_is_thread_safe(sshd):
    m = marker()
    with ssh_host(sshd) as h:
        p = h.spawn(f"sleep 300.{m}")
        errors: list[BaseException] = []

        def work(i):
            try:
                for _ in range(3):
                    assert h.run(f"echo {i}", timeout_s=20).stdout == f"{i}\n"
                    assert p.pid in p.descendants()
                    assert p.poll() is None
            except BaseException as e:      # reported in the main thread
                errors.append(e)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        p.kill_tree()
    assert no_survivors(m) == []


def test_ssh_changed_host_key_is_refused(sshd, tmp_path):
    other = tmp_path / "other"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f '{other}'")
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {(tmp_path / 'other.pub').read_text()}")
    with pytest.raises(HostError, match="does NOT match known_hosts"):
        ssh_host(sshd, known_hosts=str(kh), accept_unknown_host=True).run("true", timeout_s=20)


def test_ssh_authentication_failure(sshd, tmp_path):
    stranger = tmp_path / "stranger"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f '{stranger}'")
    with pytest.raises(HostError, match="authentication failed"):
        ssh_host(sshd, key=str(stranger)).run("true", timeout_s=20)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ssh_refused_port_fails_fast(sshd):
    port = _free_port()
    t0 = time.monotonic()
    with pytest.raises(HostError, match=rf"127\.0\.0\.1:{port}.*connection refused"):
        ssh_host(sshd, port=port, connect_timeout_s=3).run("true", timeout_s=20)
    assert time.monotonic() - t0 < 3 + 5


def test_ssh_blackhole_listener_times_out(sshd):
    # Accepts TCP (the kernel completes the handshake for the backlog) but never speaks.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        h = ssh_host(sshd, port=port, connect_timeout_s=2)
        t0 = time.monotonic()
        with pytest.raises(HostError) as e:
            h.run("true", timeout_s=20)
        elapsed = time.monotonic() - t0
    assert 1.5 < elapsed < 2 + 5, elapsed
    assert h.name in str(e.value) and "within 2 s" in str(e.value)


def test_ssh_syn_dropping_port_times_out(sshd):
    # A full accept queue makes Linux drop further SYNs: the TCP connect itself hangs.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        try:
            for _ in range(8):
                s = socket.socket()
                s.settimeout(0.3)
                try:
                    s.connect(("127.0.0.1", port))
                except OSError:
                    s.close()
                    break
                fillers.append(s)
            h = ssh_host(sshd, port=port, connect_timeout_s=2)
            t0 = time.monotonic()
            with pytest.raises(HostError, match=rf"{port}.*within 2 s"):
                h.run("true", timeout_s=20)
            elapsed = time.monotonic() - t0
        finally:
            for s in fillers:
                s.close()
    assert 1.5 < elapsed < 2 + 5, elapsed


def test_ssh_unroutable_address_times_out(sshd):
    # TEST-NET-1: either no route (fast error) or silence (timeout); never a hang.
    t0 = time.monotonic()
    with pytest.raises(HostError, match="192.0.2.1"):
        SSHHost("192.0.2.1", connect_timeout_s=2, known_hosts=sshd.known_hosts_path).run(
            "true", timeout_s=20)
    assert time.monotonic() - t0 < 2 + 5


def test_ssh_alias_from_ssh_config(sshd, monkeypatch):
    # Everything (host, port, user, key, known_hosts) comes from the config's alias.
    with SSHHost(sshd.alias, ssh_config=sshd.ssh_config_path) as h:
        assert h.run("echo via alias", timeout_s=20).stdout == "via alias\n"
        assert h.name == sshd.alias
    # The same through the experiment's [host] table and the environment (CLI/CI path).
    for k, v in sshd.env().items():
        monkeypatch.setenv(k, v)
    [h] = make_hosts(HostConfig(ssh=(sshd.alias,), connect_timeout_s=5))
    with h:
        assert isinstance(h, SSHHost) and h.run("echo env", timeout_s=20).stdout == "env\n"


def test_make_hosts(tmp_path):
    [local] = make_hosts(HostConfig(), cache_dir=tmp_path)
    assert isinstance(local, LocalHost) and local.cache_root() == str(tmp_path.resolve())
    hosts = make_hosts(HostConfig(ssh=("gpu1", "me@gpu2"), port=2222, key=None, workdir="/w",
                                  connect_timeout_s=3, python="/opt/py"))
    assert [h.name for h in hosts] == ["gpu1:2222", "me@gpu2:2222"]
    assert all(h.connect_timeout_s == 3 and h.workdir == "/w" and h.python_exe == "/opt/py"
               for h in hosts)
