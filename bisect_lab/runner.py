"""Executes trials (layer 5, docs/DEVELOPING.md).

A trial: prepare tree -> import check -> GPU hygiene -> run benchmark (timeout; the
whole process tree is killed on timeout or Ctrl-C) -> parse metrics -> fingerprint ->
store. Every trial is stored as soon as it finishes; failures are stored with their
kind and never count as measurements.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .errors import BisectLabError, HostError, PatchError
from .fingerprint import redact_value
from .hosts.base import CAMPAIGN_VAR, EXTERNAL_SIGNALS, Host, describe_signal, exit_signal
from .model import Arm, Experiment, TrialResult, TrialStatus
from .placeholders import shell_substitute
# The records of one attempt live in trial.py (serving.py uses them too); imported from here as before.
from .trial import Attempt, TrialFailed, TrialOutcome, TrialSpec, _killed, _one_line, _tail  # noqa: F401

Log = Callable[[str], None]

_ENV_SAMPLE_S = 0.2


class HostWorker:
    """Runs trials on one host; owns that host's tree manager and caches."""

    def __init__(self, host: Host, experiment: Experiment, *, log: Log | None = None):
        from .trees import TreeManager
        self.host = host
        self.exp = experiment
        self.log = log or (lambda msg: None)
        self.trees = TreeManager(host, experiment.target, experiment.patchset, log=self.log)
        self.owned_pids: set[int] = set()
        self._base_commit: str | None = None
        self._import_ok: dict[tuple, object] = {}   # -> trees.ImportCheck
        self._fp_cache = None
        self._gpu = None

    # -- lazily created, so that a host with no GPU or an unreachable host fails in a trial, not here
    @property
    def base_commit(self) -> str:
        if self._base_commit is None:
            self._base_commit = self.trees.resolve(self.exp.target.ref)
        return self._base_commit

    def prepare(self, spec: TrialSpec):
        return self.trees.prepare(sorted(spec.arm.patches), commit=spec.commit or self.base_commit)

    def trial_env(self, arm: Arm, tree) -> dict[str, str | None]:
        env: dict[str, str | None] = dict(self.exp.env)
        env.update(arm.env_dict)
        # Tree folders first; a PYTHONPATH the experiment or arm sets comes after them.
        env.update(self.trees.pythonpath_env(tree, env.get("PYTHONPATH")))
        return env

    def expected_env(self, arm: Arm) -> dict[str, str | None]:
        env: dict[str, str | None] = dict(self.exp.env)
        env.update(arm.env_dict)
        return env

    def run(self, spec: TrialSpec, campaign: str, index: int) -> TrialOutcome:
        """One trial: tree, import check, GPU hygiene, the benchmark, its metrics and fingerprint."""
        att = Attempt(self, spec, campaign, index)
        try:
            tree, env, extra = self.setup(att)
            gpu_before = self.gpu_idle(att, extra)
            return self.benchmark(att, tree, env, extra, gpu_before)
        except TrialFailed as f:
            return f.outcome
        except HostError as e:
            return att.fail(TrialStatus.HOST_ERROR, str(e))

    def setup(self, att: "Attempt"):
        """The prepared tree, the trial's environment and the import check: ``(tree, env, extra)``;
        :class:`TrialFailed` when the arm cannot be tested."""
        from .trees import BuildError
        att.commit = att.spec.commit or self.base_commit
        try:
            tree = self.prepare(att.spec)
        except BuildError as e:
            raise TrialFailed(att.fail(TrialStatus.BUILD_FAILED, str(e))) from None
        except PatchError as e:
            raise TrialFailed(att.fail(TrialStatus.APPLY_FAILED, str(e))) from None
        att.tree_hash = tree.tree_hash
        env = self.trial_env(att.spec.arm, tree)
        extra: dict = {}
        if self.exp.target.import_check:
            key = (tree.key, tuple(sorted((k, v or "") for k, v in env.items())))
            if key not in self._import_ok:
                # The benchmark's own interpreter, as the benchmark imports (no cwd on sys.path).
                self._import_ok[key] = self.trees.import_probe(tree, env, command=self.exp.benchmark.command)
            probe = self._import_ok[key]
            extra["import"] = probe.to_dict()
            if not probe.ok:
                raise TrialFailed(att.fail(TrialStatus.IMPORT_CHECK_FAILED, probe.message, dict(extra)))
        return tree, env, extra

    def gpu_idle(self, att: "Attempt", extra: dict):
        """GPU hygiene before a launch: the snapshot it took (None without [gpu]); :class:`TrialFailed`
        with ``gpu-not-idle`` when the GPUs stay busy."""
        if not self.exp.gpu.enabled:
            return None
        from .gpu import wait_idle
        idle = wait_idle(self.host, self.exp.gpu, owned_pids=self.owned_pids, log=self.log,
                         inspector=self._inspector())
        if idle.killed:
            extra["killed_before"] = _killed(idle.killed)
        if not idle.ok:
            raise TrialFailed(att.fail(TrialStatus.GPU_NOT_IDLE, idle.reason, extra))
        return getattr(idle, "snapshot", None)

    def benchmark(self, att: "Attempt", tree, env, extra: dict, gpu_before, *, values: dict | None = None,
                  also_sample: Callable[[], list[int]] | None = None) -> TrialOutcome:
        """Run the benchmark command once and read its result: what a trial measures, and what each
        reading of a serving session measures. ``values``: more placeholders (``{port}``);
        ``also_sample``: more pids whose environment is checked (the server's tree)."""
        campaign, index, arm = att.campaign, att.index, att.spec.arm
        extra = dict(extra)
        # Fresh and empty for every attempt: a resume after kill -9 reuses the killed trial's index.
        out_dir = self.trees.trial_out_dir(campaign, index, att.session)
        command = shell_substitute(self.exp.benchmark.command, {**(values or {}), "tree": tree.path, "out": out_dir})
        from .envcheck import EnvSampler
        sampler = EnvSampler(self.host, self.expected_env(arm))
        bench_t0 = time.monotonic()
        # The campaign id only travels with the benchmark (so that --resume can find what a
        # killed run left behind): it is no part of the arm's environment or fingerprint.
        proc = self.host.spawn(command, cwd=tree.path, env={**env, CAMPAIGN_VAR: campaign},
                               timeout_s=self.exp.benchmark.timeout_s)
        self.owned_pids.add(proc.pid)
        deadline = bench_t0 + self.exp.benchmark.timeout_s
        rc = None
        timed_out = False
        try:
            waits = iter((0.03, 0.07, 0.1))     # sample early too: short benchmarks exit fast
            while True:
                pids = proc.descendants()
                self.owned_pids.update(pids)
                try:
                    sampler.sample(pids + (also_sample() if also_sample else []))
                except HostError:
                    pass     # a missed sample is not a failed trial
                if time.monotonic() > deadline:
                    killed = proc.kill_tree()
                    extra["killed"] = _killed(killed)
                    timed_out = True
                    break
                rc = proc.wait(next(waits, _ENV_SAMPLE_S))
                if rc is not None:
                    break
        except BaseException:
            proc.kill_tree()      # Ctrl-C: never leave workers holding the GPU
            raise
        bench_s = time.monotonic() - bench_t0
        if not timed_out:
            # Children the benchmark left running in its session (a server started with `&`)
            # would hold the GPU into the next trial: they are ours, so they go now.
            leftovers = [k for k in proc.kill_tree() if k.pid != proc.pid]
            if leftovers:
                extra["killed_after"] = _killed(leftovers)
                self.log(f"{self.host.name}: killed {len(leftovers)} process(es) the benchmark left running: "
                         + ", ".join(f"{k.pid} ({redact_value(k.cmdline)[:60]})" for k in leftovers[:3]))
        self._prune_owned()
        stdout, stderr = proc.output()
        close = getattr(proc, "close", None)
        if close:
            close()           # captured output lives in temp files (remote ones too)
        extra["benchmark_s"] = bench_s
        env_report = sampler.report()
        extra["stdout_tail"] = redact_value(_tail(stdout, 40))
        extra["stderr_tail"] = redact_value(_tail(stderr, 40))
        er = env_report.to_dict()
        from .nccl_log import nccl_info, nccl_warnings
        nccl = nccl_info(stdout + "\n" + stderr)
        if nccl:
            # NCCL's own account (NCCL_DEBUG=INFO) beside what /proc showed.
            extra["nccl"] = nccl
            er["nccl"] = nccl
            er["warnings"] = list(er.get("warnings", [])) + nccl_warnings(nccl, self.expected_env(arm))
        said = _one_line(stderr) or _one_line(stdout)
        sig = exit_signal(rc) if not timed_out else None
        if timed_out or (sig is not None and bench_s >= self.exp.benchmark.timeout_s):
            # The second case: the backstop (hosts.backstop) ended it past the deadline.
            return att.fail(TrialStatus.TIMEOUT, f"benchmark timed out after {self.exp.benchmark.timeout_s:g} s"
                            + (f": {said}" if said else ""), extra, er)
        if rc != 0:
            if sig is None:
                msg = f"benchmark exited with {rc}: {said or '(no output)'}"
                return att.fail(TrialStatus.CRASHED, msg, extra, er)
            # Not our kill (ours are timeouts): an outside kill is retried, a crash is the arm's.
            msg = f"benchmark was {describe_signal(sig)}, exit status {rc}: {said or '(no output)'}"
            status = TrialStatus.KILLED if sig in EXTERNAL_SIGNALS else TrialStatus.CRASHED
            return att.fail(status, msg, extra, er)
        from .parsers import ParseError, parse
        try:
            metrics = parse(self.exp.benchmark.parser, stdout, stderr,
                            out_dir=out_dir if self.host.is_local else None,
                            files=None if self.host.is_local else self._result_files(out_dir),
                            patterns=dict(self.exp.benchmark.patterns), metric=self.exp.benchmark.metric,
                            secondary=[m for m, _ in self.exp.benchmark.secondary])
        except ParseError as e:
            # The benchmark's own words: what it printed instead of a result.
            said = _one_line(stdout) or _one_line(stderr) or "(no output)"
            return att.fail(TrialStatus.PARSE_ERROR, f"{e}; the benchmark printed: {said}", extra, er)

        gpu_after = None
        if self.exp.gpu.enabled and gpu_before is not None and gpu_before.has_gpu:
            # Clocks and throttling right after the load: the state the benchmark ran in.
            try:
                gpu_after = self._inspector().probe()
            except HostError:
                pass
        fp_id, fp_data, flags = self._fingerprint(tree, env, gpu_before, gpu_after)
        result = att.result(TrialStatus.OK, metrics=metrics, fingerprint=fp_id, env_report=er, flags=tuple(flags))
        return TrialOutcome(result, extra, fp_data)

    def end_leftovers(self, campaign: str) -> list[dict]:
        """Kill what an earlier run of ``campaign`` left running on this host (a bisect-lab killed
        with SIGKILL, a dropped connection): the processes whose environment carries the campaign
        id, and nothing else. Each kill is logged; an unreachable host is logged, not fatal (its
        trials will say so)."""
        try:
            killed = _killed(self.host.kill_campaign(campaign))
        except HostError as e:
            self.log(f"{self.host.name}: could not look for processes left running by campaign {campaign}: {e}")
            return []
        for k in killed:
            self.log(f"{self.host.name}: killed pid {k['pid']}, left running by an earlier run of campaign "
                     f"{campaign}: {k['cmdline'][:200] or '(command line not visible)'}")
        return killed

    def _result_files(self, out_dir: str) -> dict[str, str]:
        """Result files the benchmark wrote on a remote host ({out}), for the parsers."""
        res = self.host.quick(["find", out_dir, "-maxdepth", "1", "-type", "f", "-size", "-8M",
                             "(", "-name", "*.json", "-o", "-name", "*.jsonl", "-o", "-name", "*.log", ")"],
                            timeout_s=30)
        files = {}
        for path in res.stdout.split("\n"):
            if path.strip():
                try:
                    files[path.rsplit("/", 1)[-1]] = self.host.read_bytes(path).decode("utf-8", "replace")
                except (OSError, HostError):
                    pass
        return files

    def _prune_owned(self) -> None:
        """Forget pids that have exited, so a recycled pid is never taken for ours."""
        if not self.owned_pids:
            return
        if self.host.is_local:
            import psutil
            self.owned_pids = {p for p in self.owned_pids if psutil.pid_exists(p)}
            return
        pids = ",".join(str(p) for p in sorted(self.owned_pids))
        res = self.host.quick(["ps", "-o", "pid=", "-p", pids], timeout_s=30)
        alive = {int(x) for x in res.stdout.split() if x.isdigit()}
        if res.returncode in (0, 1):
            self.owned_pids &= alive

    def _inspector(self):
        if self._gpu is None:
            from .gpu import GpuInspector
            self._gpu = GpuInspector(self.host)
        return self._gpu

    def _fingerprint(self, tree, env, gpu_before, gpu_after) -> tuple[str | None, dict | None, list[str]]:
        from . import fingerprint as fpmod
        if self._fp_cache is None:
            self._fp_cache = fpmod.FingerprintCache()
        fp = fpmod.collect(self.host, tree_hash=tree.tree_hash, patch_hashes=tree.patch_hashes,
                           env={k: v for k, v in env.items() if v is not None}, gpu=gpu_before,
                           gpu_after=gpu_after, cache=self._fp_cache, inspector=self._inspector(),
                           probe_gpu=self.exp.gpu.enabled)
        # Clock/throttle flags are relative to the campaign's norm: set when the campaign ends.
        return fp.id, fp.to_dict(), []

    def close(self):
        self.host.close()


# --------------------------------------------------------------------------- executor
# Tries one trial may lose with its node (each next try on a new job) beyond ``[design] retries``:
# enough for a failing node to be dropped (two failed jobs) and the trial measured elsewhere, few
# enough that a cluster whose every node fails still ends.
MAX_NODE_LOSSES = 4


class Executor:
    """Runs batches of trial specs on a pool of hosts (one trial at a time per host).

    Replays stored trials first (resume); retries infrastructure failures a bounded
    number of times; stores every attempt the moment it finishes; stops the campaign
    with :class:`NoMeasurementError` when the benchmark fails on every try. With ``[server]``
    each spec is one serving session and its result stands for the session (bisect_lab.serving).
    """

    def __init__(self, experiment: Experiment, store, campaign: str, workers: list[HostWorker], *,
                 on_trial: Callable[[TrialResult], None] | None = None, log: Log | None = None,
                 fail_fast_after: int = 3, on_replay: Callable[[TrialResult], None] | None = None,
                 readings_for: Callable[[TrialSpec], int] | None = None):
        self.exp = experiment
        self.store = store
        self.campaign = campaign
        self.workers = workers
        self.on_trial = on_trial or (lambda r: None)
        self.on_replay = on_replay or (lambda r: None)
        self.log = log or (lambda m: None)
        self.fail_fast_after = fail_fast_after
        self._next_index = store.next_trial_index(campaign)
        self._replay: dict[tuple, list[TrialResult]] = {}
        for t in store.trials(campaign):
            self._replay.setdefault((t.arm, t.commit), []).append(t)
        self._lock = threading.Lock()
        self.measured = 0          # trials run in this invocation
        self.replayed = 0
        self._ok_seen = False
        self._failures: list[TrialResult] = []
        # With [server] every spec is one serving session (bisect_lab.serving); ``readings_for(spec)``
        # says how many readings it takes (default: the experiment's, 3 for "auto").
        self._sessions = None
        if experiment.server is not None:
            from .serving import SessionRunner
            self._sessions = SessionRunner(self, readings_for)

    @property
    def trials_total(self) -> int:
        return self.measured + self.replayed

    def _replay_pop(self, spec: TrialSpec) -> TrialResult | None:
        q = self._replay.get(spec.key)
        return q.pop(0) if q else None

    def _take_index(self) -> int:
        with self._lock:
            i = self._next_index
            self._next_index += 1
            return i

    def _attempt(self, worker: HostWorker, spec: TrialSpec) -> TrialResult:
        retries = max(0, self.exp.design.retries)
        failed = node_losses = 0
        while True:
            result = self._sessions.once(worker, spec) if self._sessions else self._once(worker, spec)
            if not result.status.is_infrastructure:
                break
            # A try lost with its node (a Slurm job that died) says nothing about the trial: the
            # next try runs on a new job, so it does not spend the trial's own retries.
            if getattr(worker, "lost_to_node", False) and node_losses < MAX_NODE_LOSSES:
                node_losses += 1
                self.log(f"{result.host}: {result.status.value} ({result.error}); retrying on a new job")
                continue
            failed += 1
            self.log(f"{result.host}: {result.status.value} ({result.error}); "
                     f"{'retrying' if failed <= retries else 'giving up'}")
            if failed > retries:
                break
        self._check_fail_fast(result)
        return result

    def _once(self, worker: HostWorker, spec: TrialSpec) -> TrialResult:
        """One trial: the stored one a resume replays, else a new run, stored at once."""
        stored = self._replay_pop(spec)
        if stored is not None:
            self.replayed += 1
            self.on_replay(stored)
            return stored
        out = worker.run(spec, self.campaign, self._take_index())
        self.store.add_trial(out.result, extra=out.extra, fingerprint_data=out.fingerprint_data)
        self.measured += 1
        self.on_trial(out.result)
        return out.result

    def _check_fail_fast(self, result: TrialResult):
        from .errors import NoMeasurementError
        with self._lock:
            if result.ok:
                self._ok_seen = True
                return
            if result.status.is_untestable:
                return
            self._failures.append(result)
            if not self._ok_seen and len(self._failures) >= self.fail_fast_after:
                kinds = {f.status.value for f in self._failures}
                last = self._failures[-1]
                raise NoMeasurementError(
                    f"no measurement could be made: the benchmark failed on every try "
                    f"({len(self._failures)} tries, {', '.join(sorted(kinds))}); last error: {last.error}")

    def require_measurements(self) -> None:
        """Raise :class:`NoMeasurementError` when the campaign has no successful trial at all."""
        from .errors import NoMeasurementError
        trials = self.store.trials(self.campaign)
        if trials and not any(t.ok for t in trials):
            failed = [t for t in trials if not t.ok]
            kinds = sorted({t.status.value for t in failed})
            raise NoMeasurementError(
                f"no measurement could be made: every try failed ({len(failed)} tries, {', '.join(kinds)}); "
                f"last error: {failed[-1].error}")

    def run_batch(self, specs: list[TrialSpec], *, per_host: bool = False) -> list[TrialResult]:
        """Measure ``specs``; results come back in the order of ``specs``.

        With several hosts, specs are spread over them (one trial at a time per host).
        ``per_host=True`` pins ``specs[i]`` to worker ``i % len(workers)``.
        """
        # Stored trials carry the resolved commit: resolve the base ref so replay keys match.
        specs = [s if s.commit else TrialSpec(s.arm, self.workers[0].base_commit, s.tag) for s in specs]
        if len(self.workers) == 1 or len(specs) == 1:
            w = self.workers[0]
            return [self._attempt(w, s) for s in specs]
        results: list[TrialResult | None] = [None] * len(specs)
        errors: list[BaseException] = []
        queue = list(enumerate(specs))
        qlock = threading.Lock()

        def work(wi: int, worker: HostWorker):
            while True:
                with qlock:
                    if errors:
                        return
                    pick = None
                    for j, (i, s) in enumerate(queue):
                        if not per_host or i % len(self.workers) == wi:
                            pick = queue.pop(j)
                            break
                    if pick is None:
                        return
                i, s = pick
                try:
                    results[i] = self._attempt(worker, s)
                except BaseException as e:   # surfaced in the caller's thread
                    with qlock:
                        errors.append(e)
                    return

        threads = [threading.Thread(target=work, args=(wi, w), daemon=True) for wi, w in enumerate(self.workers)]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
        if errors:
            raise errors[0]
        return [r for r in results if r is not None]
