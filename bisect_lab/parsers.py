"""Benchmark output -> metrics (docs/contracts.md, [benchmark]; layer 3).

Pure functions: text in, ``dict[str, float]`` out. The only I/O is reading the
result files a benchmark wrote into its per-trial ``out_dir`` on this machine;
for a remote host the runner passes those files' contents as ``files`` instead
(parsers never talk to a host).

Every builtin parser finds values *by label*, never by line position, because
SGLang renames, adds and reorders rows between versions. Builtin parsers name
metrics with the keys of SGLang's own result JSON (``output_throughput``,
``median_ttft_ms``, ``accept_length``...), so a metric means the same thing
whether it came from the printed table or from ``--output-file``.

Metric names per builtin parser:

- ``sglang-bench-serving``: ``output_throughput``, ``request_throughput``,
  ``input_throughput``, ``total_throughput`` (from "Total token", "Total Token"
  or "Total throughput"), ``accept_length``, ``completed``, ``duration``,
  ``concurrency``, ``request_rate`` (``inf`` allowed), ``max_concurrency``,
  ``total_input_tokens``, ``total_output_tokens``, ``max_output_tokens_per_s``,
  ``{mean,median,std,p90,p95,p99,max}_{ttft,tpot,itl,e2e_latency}_ms`` as
  printed, plus every numeric key of the last ``--output-file`` JSON line
  (which wins over the rounded table). Unknown rows keep a slug of their label.
- ``sglang-bench-one-batch``: ``prefill_latency_s``, ``prefill_throughput``,
  ``decode_median_latency_s``, ``decode_median_throughput``,
  ``total_latency_s``, ``total_throughput``, and SGLang's JSON names for the
  same numbers (``prefill_latency``, ``median_decode_latency``,
  ``median_decode_throughput``, ``total_latency``, ``overall_throughput``).
- ``sglang-bench-one-batch-server``: ``output_throughput``,
  ``last_gen_throughput``, ``input_throughput``, ``latency``, ``ttft``,
  ``last_ttft``, ``acc_length`` (= ``accept_length``), ``cache_hit_rate``,
  ``decode_latency``, ``tpot``, ``batch_size``, ``input_len``, ``output_len``.
- ``sglang-server-log``: ``gen_throughput`` and ``accept_length`` (medians over
  decode log lines), ``cuda_graph`` (fraction of decode lines with
  ``cuda graph: True``: 1.0 / 0.0 normally), ``decode_log_lines``.
- ``vllm-bench-serve`` (its block and ``--save-result`` JSON, which wins): vLLM's
  JSON keys (``total_token_throughput``, ``{mean,median,p99,...}_{ttft,tpot,itl,e2el}_ms``,
  ``spec_decode_acceptance_length``...), plus ``accept_length`` and ``total_throughput``.
- ``regex``: the keys of ``patterns``. ``json``: dotted paths of numeric leaves.

Public API: :func:`parse`, :func:`validate`, :data:`PARSERS`,
:class:`ParseError`, :class:`ParserConfigError`.
"""
from __future__ import annotations

import json
import math
import os
import re
import statistics
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .errors import EXIT_NO_MEASUREMENT, EXIT_USAGE, BisectLabError

__all__ = ["parse", "validate", "PARSERS", "ParseError", "ParserConfigError", "TAIL_LINES"]

TAIL_LINES = 20


# --------------------------------------------------------------------------- errors
class ParseError(BisectLabError):
    """The benchmark's output held no usable measurement.

    The runner stores the trial as ``parse-error``; ``tail`` holds the last
    lines of the output (stdout, or stderr when stdout is empty) so the user
    sees what the benchmark actually said. ``found`` lists the metric names that
    *were* parsed (empty when nothing was), so a wrong ``metric`` name is
    obvious from the message.
    """

    exit_code = EXIT_NO_MEASUREMENT

    def __init__(self, message: str, *, tail: str = "", parser: str = "",
                 metric: str | None = None, found: Iterable[str] = ()):
        self.tail = tail
        self.parser = parser
        self.metric = metric
        self.found = tuple(sorted(found))
        super().__init__(message)


class ParserConfigError(BisectLabError):
    """Unknown parser name or bad ``[benchmark.patterns]``: a usage error (exit 2),
    not a failed trial, so the campaign stops before running anything."""

    exit_code = EXIT_USAGE


# --------------------------------------------------------------------------- helpers
# A number as SGLang / Python print it, plus the non-finite spellings of
# Python's str(float) and of JSON-with-Infinity.
_NUM = r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf(?:inity)?|nan)\b"
_NUM_RE = re.compile(rf"^\s*({_NUM})", re.IGNORECASE)


def _to_float(text: str) -> float | None:
    """Leading number of ``text`` (units after it are ignored), or None."""
    m = _NUM_RE.match(text)
    if not m:
        return None
    try:
        return float(m.group(1).replace(",", ""))
    except ValueError:
        return None


def _tail(stdout: str, stderr: str, n: int = TAIL_LINES) -> str:
    text = stdout if stdout.strip() else stderr
    return "\n".join(text.rstrip().splitlines()[-n:])


def _norm_label(label: str) -> str:
    return " ".join(label.strip().rstrip(":").split()).lower()


def _slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", _norm_label(label)).strip("_")


def _json_objects_in_lines(text: str) -> list[dict]:
    """Every one-line JSON object in ``text``, in order (JSON-lines output).

    ``json.loads`` accepts ``Infinity`` / ``NaN``, which SGLang writes for
    ``request_rate = inf``.
    """
    out = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("{") and s.endswith("}"):
            try:
                obj = json.loads(s)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out


class _OutFiles:
    """The files a benchmark left for the parser: the trial's ``out_dir`` on this
    machine and/or ``files`` (name -> text) the runner already fetched from a
    remote host. Read lazily: only the suffixes a parser asks for."""

    def __init__(self, out_dir: str | None, files: Mapping[str, str] | None):
        self.out_dir = out_dir if out_dir and os.path.isdir(out_dir) else None
        self.files = dict(files or {})

    def texts(self, suffixes: tuple[str, ...]) -> list[tuple[str, str]]:
        """(name, text) of matching files, oldest first: out_dir by mtime, then ``files``."""
        out: list[tuple[str, str]] = []
        if self.out_dir:
            paths = [p for p in Path(self.out_dir).iterdir() if p.is_file() and p.name.endswith(suffixes)]
            for p in sorted(paths, key=lambda p: (p.stat().st_mtime, p.name)):
                try:
                    out.append((p.name, p.read_text(errors="replace")))
                except OSError:
                    continue
        out += [(n, t) for n, t in self.files.items() if os.path.basename(n).endswith(suffixes)]
        return out

    def get(self, name: str) -> str | None:
        for n, t in reversed(self.texts((name,))):
            if os.path.basename(n) == name:
                return t
        return None


def _numeric_items(obj: Mapping[str, Any]) -> dict[str, float]:
    """Top-level numeric values of a result JSON (None / strings / lists dropped)."""
    out = {}
    for k, v in obj.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        out[str(k)] = float(v)
    return out


def _last_result_json(stdout: str, out: _OutFiles, keys: tuple[str, ...]) -> dict | None:
    """The last JSON-lines record that has one of ``keys``.

    Files in ``out_dir`` win over stdout: ``--output-file`` / ``--result-filename``
    is the benchmark's own machine-readable record. Within a file SGLang
    *appends* one line per run, so the last line is the latest run.
    """
    for source in [*(t for _, t in reversed(out.texts((".jsonl", ".json")))), stdout]:
        for obj in reversed(_json_objects_in_lines(source)):
            if any(k in obj for k in keys):
                return obj
    return None


# --------------------------------------------------------------------------- bench_serving
# Label (normalised: lower case, single spaces, no colon) -> SGLang result-JSON key.
_SERVING_LABELS = {
    "backend": None,
    "traffic request rate": "request_rate",
    "max request concurrency": "max_concurrency",
    "maximum request concurrency": "max_concurrency",    # vLLM-derived older text
    "request rate configured (rps)": "request_rate",
    "successful requests": "completed",
    "failed requests": "failed",
    "benchmark duration (s)": "duration",
    "total input tokens": "total_input_tokens",
    "total input text tokens": "total_input_text_tokens",
    "total input vision tokens": "total_input_vision_tokens",
    "total generated tokens": "total_output_tokens",
    "total generated tokens (retokenized)": "total_output_tokens_retokenized",
    "request throughput (req/s)": "request_throughput",
    "request goodput (req/s)": "request_goodput",
    "input token throughput (tok/s)": "input_throughput",
    "output token throughput (tok/s)": "output_throughput",
    "peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "peak concurrent requests": "max_concurrent_requests",
    # Renamed twice across SGLang versions; all mean input + output tokens / s.
    "total token throughput (tok/s)": "total_throughput",
    "total throughput (tok/s)": "total_throughput",
    "concurrency": "concurrency",
    "accept length": "accept_length",
    "last generation throughput (tok/s)": "last_gen_throughput",
}

# "Mean TTFT (ms)", "P99 ITL (ms)", "Median E2E Latency (ms)", "P99.9 TPOT (ms)", "Std E2EL (ms)"
_STAT_LABEL = re.compile(
    r"^(mean|median|std|min|max|p\d+(?:\.\d+)?) (ttft|tpot|itl|e2e latency|e2el) \((ms|s)\)$")
_STAT_KEY = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e latency": "e2e_latency",
             "e2el": "e2e_latency"}

# The frame: "===== Serving Benchmark Result =====" (bench_offline_throughput
# prints the same table under "Offline Throughput Benchmark Result").
_SERVING_HEADER = re.compile(r"^(.*?)=+\s*((?:Serving|Offline Throughput) Benchmark Result)\s*=+\s*$")
_RULE = re.compile(r"^\s*={10,}\s*$")
_ROW = re.compile(r"^\s*([A-Za-z][^:]*?):\s+(\S.*?)\s*$")
_SERVING_JSON_KEYS = ("output_throughput", "request_throughput", "total_throughput",
                      "input_throughput", "median_ttft_ms", "accept_length")


def _serving_label_key(label: str) -> str | None:
    n = _norm_label(label)
    if n in _SERVING_LABELS:
        return _SERVING_LABELS[n]
    m = _STAT_LABEL.match(n)
    if m:
        stat, what, unit = m.groups()
        return f"{stat}_{_STAT_KEY[what]}_{unit}"
    # Unknown row from a newer SGLang: keep it under a stable slug rather than
    # dropping it, so a metric that appears tomorrow is still usable.
    return _slug(label)


def _serving_blocks(text: str, label_key: Callable[[str], str | None] | None = None) -> list[dict[str, float]]:
    """Every framed result block in ``text``, parsed, in order (rows named by ``label_key``)."""
    label_key = label_key or _serving_label_key
    blocks: list[dict[str, float]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _SERVING_HEADER.match(lines[i])
        if not m:
            i += 1
            continue
        # Log collectors prefix every line ("[1,0]<stdout>:", "host | "); the
        # header's prefix tells us what to strip from the rows.
        prefix = m.group(1)
        metrics: dict[str, float] = {}
        i += 1
        while i < len(lines):
            line = lines[i]
            if prefix and line.startswith(prefix):
                line = line[len(prefix):]
            if _RULE.match(line) or _SERVING_HEADER.match(lines[i]):
                break
            row = _ROW.match(line)
            if row:
                key = label_key(row.group(1))
                value = _to_float(row.group(2))
                if key and value is not None:
                    metrics[key] = value
            i += 1
        if metrics:
            blocks.append(metrics)
    return blocks


def _parse_bench_serving(stdout: str, stderr: str, out: _OutFiles, *, label_key=None, json_keys=_SERVING_JSON_KEYS,
                         name: str = "sglang-bench-serving", **_) -> dict[str, float]:
    blocks = _serving_blocks(stdout, label_key) or _serving_blocks(stderr, label_key)
    metrics = dict(blocks[-1]) if blocks else {}
    record = _last_result_json(stdout, out, json_keys)
    if record is not None:
        # The JSON has full precision (the table rounds to 2 decimals) and
        # the same key names, so it overrides the text values.
        metrics.update(_numeric_items(record))
    if metrics.get("completed") == 0:
        raise ParseError(f"{name}: the benchmark reported 0 successful requests", found=metrics)
    return metrics


# --------------------------------------------------------------------------- vllm bench serve
# SGLang's frame with vLLM's labels; metrics take the keys of vLLM's `--save-result` JSON.
_VLLM_LABELS = {**_SERVING_LABELS, "total token throughput (tok/s)": "total_token_throughput",
                "rtfx (inverse real-time factor)": "rtfx", "acceptance rate (%)": "spec_decode_acceptance_rate",
                "acceptance length": "spec_decode_acceptance_length", "drafts": "spec_decode_num_drafts",
                "draft tokens": "spec_decode_draft_tokens", "accepted tokens": "spec_decode_accepted_tokens"}
_VLLM_STAT = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?) (ttft|tpot|itl|e2el) \(ms\)$")
# SGLang's names for the same numbers, so one metric name reads both stacks
_VLLM_ALIASES = {"accept_length": "spec_decode_acceptance_length", "total_throughput": "total_token_throughput"}


def _vllm_label_key(label: str) -> str | None:
    n = _norm_label(label)
    m = _VLLM_STAT.match(n)
    if n in _VLLM_LABELS or m:
        return _VLLM_LABELS[n] if n in _VLLM_LABELS else f"{m.group(1)}_{m.group(2)}_ms"
    # per-position acceptance rates are a list in the JSON, not metrics
    return None if re.match(r"^position \d+$", n) else _slug(label)


def _parse_vllm_bench_serve(stdout: str, stderr: str, out: _OutFiles, **_) -> dict[str, float]:
    metrics = _parse_bench_serving(stdout, stderr, out, label_key=_vllm_label_key, name="vllm-bench-serve",
                                   json_keys=("output_throughput", "total_token_throughput", "request_throughput"))
    metrics.update({a: metrics[k] for a, k in _VLLM_ALIASES.items() if k in metrics and a not in metrics})
    return metrics


# --------------------------------------------------------------------------- bench_one_batch
_OB_PREFILL = re.compile(rf"Prefill\.\s+latency:\s*({_NUM})\s*s,\s*throughput:\s*({_NUM})", re.I)
_OB_DECODE_MEDIAN = re.compile(
    rf"Decode\.\s+median latency:\s*({_NUM})\s*s,\s*median throughput:\s*({_NUM})", re.I)
_OB_TOTAL = re.compile(rf"Total\.\s+latency:\s*({_NUM})\s*s,\s*throughput:\s*({_NUM})", re.I)
_OB_WARMUP = re.compile(r"^\s*Warmup\s*\.\.\.", re.I)
_OB_BENCH = re.compile(r"^\s*Benchmark\s*\.\.\.", re.I)
_OB_JSON_KEYS = ("median_decode_throughput", "overall_throughput", "prefill_throughput")


def _parse_bench_one_batch(stdout: str, stderr: str, out: _OutFiles, **_) -> dict[str, float]:
    text = stdout if (_OB_PREFILL.search(stdout) or _OB_TOTAL.search(stdout)) else stderr
    lines = text.splitlines()
    # bench_one_batch prints "Warmup ..." and a full result set, then
    # "Benchmark ..." and one set per (batch, input, output) case. Only the
    # sets after the last "Benchmark ..." are measurements; a run that warmed
    # up but never reached "Benchmark ..." measured nothing.
    start = 0
    saw_warmup = False
    for idx, line in enumerate(lines):
        if _OB_BENCH.search(line):
            start = idx + 1
        elif _OB_WARMUP.search(line) and start == 0:
            saw_warmup = True
    if saw_warmup and start == 0:
        lines = []
    else:
        lines = lines[start:]
    # A set starts at "Prefill."; the last set is the last case measured.
    last_prefill = max((i for i, l in enumerate(lines) if _OB_PREFILL.search(l)), default=0)
    metrics: dict[str, float] = {}
    for line in lines[last_prefill:]:
        for rx, lat_keys, thr_keys in (
            (_OB_PREFILL, ("prefill_latency_s", "prefill_latency"), ("prefill_throughput",)),
            (_OB_DECODE_MEDIAN, ("decode_median_latency_s", "median_decode_latency"),
             ("decode_median_throughput", "median_decode_throughput")),
            (_OB_TOTAL, ("total_latency_s", "total_latency"), ("total_throughput", "overall_throughput")),
        ):
            m = rx.search(line)
            if m:
                lat, thr = _to_float(m.group(1)), _to_float(m.group(2))
                for k in lat_keys:
                    metrics[k] = lat
                for k in thr_keys:
                    metrics[k] = thr
    record = _last_result_json("", out, _OB_JSON_KEYS)   # --result-filename
    if record is not None:
        nums = _numeric_items(record)
        metrics.update(nums)
        for ours, theirs in (("prefill_latency_s", "prefill_latency"),
                             ("decode_median_latency_s", "median_decode_latency"),
                             ("decode_median_throughput", "median_decode_throughput"),
                             ("total_latency_s", "total_latency"),
                             ("total_throughput", "overall_throughput")):
            if theirs in nums:
                metrics[ours] = nums[theirs]
    return {k: v for k, v in metrics.items() if v is not None}


# --------------------------------------------------------------------------- bench_one_batch_server
# Lines are "label: value unit"; "acc_length: 2.31 " keeps a trailing space.
_OBS_LABELS = {
    "batch size": "batch_size",
    "input_len": "input_len",
    "output_len": "output_len",
    "latency": "latency",
    "ttft": "ttft",
    "input throughput": "input_throughput",
    "output throughput": "output_throughput",
    "overall throughput": "overall_throughput",
    "last_ttft": "last_ttft",
    "last ttft": "last_ttft",
    "last generation throughput": "last_gen_throughput",
    "acc_length": "acc_length",
    "accept length": "acc_length",
    "cache hit rate": "cache_hit_rate",
    "decode_latency": "decode_latency",
    "tpot": "tpot",
}
_OBS_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z_ ]*?)\s*:\s*(\S.*?)\s*$")
_OBS_JSON_KEYS = ("last_gen_throughput", "output_throughput", "acc_length")


def _parse_bench_one_batch_server(stdout: str, stderr: str, out: _OutFiles, **_):
    cases: list[dict[str, float]] = []
    for text in (stdout, stderr):
        for line in text.splitlines():
            m = _OBS_LINE.match(line)
            if not m:
                continue
            key = _OBS_LABELS.get(_norm_label(m.group(1)))
            value = _to_float(m.group(2))
            if key is None or value is None:
                continue
            # Each case begins with "batch size:"; keep only the last case.
            if key == "batch_size" or not cases:
                cases.append({})
            cases[-1][key] = value
        if cases:
            break
    metrics = cases[-1] if cases else {}
    record = _last_result_json("", out, _OBS_JSON_KEYS)   # --result-filename
    if record is not None:
        metrics.update(_numeric_items(record))
    if "acc_length" in metrics:
        # One name for the same quantity across all builtin parsers.
        metrics["accept_length"] = metrics["acc_length"]
    if metrics.get("acc_length", 0) < 0:            # SGLang writes -1 for "no speculation"
        metrics.pop("acc_length")
        metrics.pop("accept_length")
    if set(metrics) <= {"batch_size", "input_len", "output_len"}:
        return {}                                    # a case header alone measures nothing
    return metrics


# --------------------------------------------------------------------------- server log
_LOG_DECODE = re.compile(r"Decode batch[.,]", re.I)
_LOG_GEN = re.compile(rf"gen throughput \(token/s\):\s*({_NUM})", re.I)
_LOG_ACCEPT = re.compile(rf"accept len(?:gth)?:\s*({_NUM})", re.I)
_LOG_GRAPH = re.compile(r"cuda graph:\s*(True|False)", re.I)


def _parse_server_log(stdout: str, stderr: str, out: _OutFiles, **_) -> dict[str, float]:
    texts = [stdout, stderr, *(t for _, t in out.texts((".log",)))]
    gen: list[float] = []
    acc: list[float] = []
    graph: list[bool] = []
    for text in texts:
        for line in text.splitlines():
            # Prefill lines also carry "cuda graph: False": only decode lines count.
            if not _LOG_DECODE.search(line):
                continue
            m = _LOG_GEN.search(line)
            if not m:
                continue
            v = _to_float(m.group(1))
            if v is None or not math.isfinite(v):
                continue
            gen.append(v)
            if (a := _LOG_ACCEPT.search(line)) and (av := _to_float(a.group(1))) is not None:
                acc.append(av)
            if g := _LOG_GRAPH.search(line):
                graph.append(g.group(1).lower() == "true")
    if not gen:
        return {}
    metrics = {"gen_throughput": statistics.median(gen), "decode_log_lines": float(len(gen))}
    if acc:
        metrics["accept_length"] = statistics.median(acc)
    if graph:
        # Fraction of decode steps that ran under CUDA graphs: 1.0 / 0.0 in the
        # normal case, in between exposes "graphs for some batch sizes only".
        metrics["cuda_graph"] = sum(graph) / len(graph)
    return metrics


# --------------------------------------------------------------------------- regex
def _compile_patterns(patterns: Mapping[str, str] | None) -> dict[str, re.Pattern]:
    if not patterns:
        raise ParserConfigError("parser 'regex' needs [benchmark.patterns]: metric name -> regex "
                                "with one group")
    out = {}
    for name, pat in patterns.items():
        if not isinstance(pat, str):
            raise ParserConfigError(f"[benchmark.patterns] {name}: expected a string regex")
        try:
            rx = re.compile(pat, re.MULTILINE)
        except re.error as e:
            raise ParserConfigError(f"[benchmark.patterns] {name}: invalid regex {pat!r}: {e}") from None
        if rx.groups != 1:
            raise ParserConfigError(f"[benchmark.patterns] {name}: regex {pat!r} must have exactly "
                                    f"one group, it has {rx.groups}")
        out[name] = rx
    return out


def _parse_regex(stdout: str, stderr: str, out: _OutFiles, *, patterns=None, **_):
    compiled = _compile_patterns(patterns)
    metrics: dict[str, float] = {}
    for name, rx in compiled.items():
        # stdout is where benchmarks print results; stderr is searched only when
        # stdout has no parseable match (results logged through `logging`).
        for text in (stdout, stderr):
            values = [v for v in (_to_float(m.group(1) or "") for m in rx.finditer(text)) if v is not None]
            if values:
                metrics[name] = values[-1]           # last match wins: the final report
                break
    return metrics


# --------------------------------------------------------------------------- json
def _flatten(obj: Any, prefix: str, out: dict[str, float]) -> None:
    if isinstance(obj, bool):
        out[prefix] = 1.0 if obj else 0.0
    elif isinstance(obj, (int, float)):
        out[prefix] = float(obj)
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), out)


def _last_json_object(text: str) -> dict | None:
    """The JSON object that ends last in ``text``, one-line or pretty-printed.

    Candidates start at a line beginning with ``{``; of those that decode, the
    one ending last wins and, on a tie, the outermost (earliest start), so a
    nested object of a pretty-printed document never shadows its parent.
    """
    dec = json.JSONDecoder()
    best: tuple[int, int, dict] | None = None
    pos = 0
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        if stripped.startswith("{"):
            start = pos + len(line) - len(stripped)
            try:
                obj, end = dec.raw_decode(text, start)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and (best is None or end > best[1]):
                best = (start, end, obj)
        pos += len(line)
    return best[2] if best else None


def _parse_json(stdout: str, stderr: str, out: _OutFiles, **_) -> dict[str, float]:
    obj = None
    text = out.get("results.json")
    if text is not None:
        obj = _last_json_object(text)
    if obj is None:
        obj = _last_json_object(stdout)
    metrics: dict[str, float] = {}
    if obj is not None:
        _flatten(obj, "", metrics)
    return metrics


# --------------------------------------------------------------------------- registry
Parser = Callable[..., dict]

PARSERS: dict[str, Parser] = {
    "sglang-bench-serving": _parse_bench_serving,
    "sglang-bench-one-batch": _parse_bench_one_batch,
    "sglang-bench-one-batch-server": _parse_bench_one_batch_server,
    "sglang-server-log": _parse_server_log,
    "vllm-bench-serve": _parse_vllm_bench_serve,
    "regex": _parse_regex,
    "json": _parse_json,
}
"""Builtin parsers by the name used in ``[benchmark] parser``."""

_WHAT = {
    "sglang-bench-serving": "no 'Serving Benchmark Result' block or --output-file JSON line",
    "sglang-bench-one-batch": "no 'Prefill.' / 'Decode.  median' / 'Total.' result lines after 'Benchmark ...'",
    "sglang-bench-one-batch-server": "no 'output throughput:' / 'last generation throughput:' lines",
    "sglang-server-log": "no 'Decode batch ... gen throughput (token/s):' log lines",
    "vllm-bench-serve": "no 'Serving Benchmark Result' block or --save-result JSON in the out folder",
    "regex": "no pattern matched",
    "json": "no JSON object on stdout or in results.json",
}


def validate(parser: str, patterns: Mapping[str, str] | None = None) -> None:
    """Check a ``[benchmark]`` parser configuration before any trial runs.

    Raises :class:`ParserConfigError` for an unknown parser name, and for
    ``regex`` without patterns, with an invalid regex or one whose group count
    is not exactly one.
    """
    if parser not in PARSERS:
        raise ParserConfigError(f"unknown parser {parser!r}; builtin parsers: {', '.join(PARSERS)}")
    if parser == "regex":
        _compile_patterns(patterns)


def parse(parser: str, stdout: str, stderr: str = "", *, out_dir: str | None = None,
          patterns: Mapping[str, str] | None = None, metric: str | None = None,
          files: Mapping[str, str] | None = None, secondary: Sequence[str] = ()) -> dict[str, float]:
    """Extract metrics from one benchmark run's output.

    ``parser`` is a name from :data:`PARSERS`; ``out_dir`` is the trial's
    ``{out}`` folder on this machine (files the benchmark wrote there, e.g.
    ``--output-file`` JSON lines, are read); ``files`` (name -> text) is the
    same for a remote host, whose out folder the runner fetched through the
    Host; ``patterns`` is ``[benchmark.patterns]`` for
    ``regex``; ``metric`` is the primary metric, which must be present, finite
    and > 0; ``secondary`` names the ``[benchmark.secondary]`` metrics, which
    may be missing but, when present, must be finite and > 0 too (they are
    compared as ratios).

    Returns metric name -> value. Other values may be ``inf`` / ``nan`` (SGLang
    writes ``Infinity`` / ``NaN``) or zero.

    Raises :class:`ParseError` (with ``.tail``) when nothing parseable is found,
    the primary metric is missing, or a checked metric is not a positive number, and
    :class:`ParserConfigError` for an unknown parser or bad patterns.
    """
    validate(parser, patterns)
    stdout = stdout or ""
    stderr = stderr or ""
    tail = _tail(stdout, stderr)
    try:
        metrics = PARSERS[parser](stdout, stderr, _OutFiles(out_dir, files), patterns=patterns)
    except ParseError as e:
        # Parsers raise with a message only; add the context here, once.
        raise ParseError(str(e), tail=tail, parser=parser, metric=metric, found=e.found) from None
    if not metrics:
        what = "empty output" if not (stdout.strip() or stderr.strip()) else _WHAT[parser]
        raise ParseError(f"{parser}: {what}", tail=tail, parser=parser, metric=metric)
    if metric is not None:
        if metric not in metrics:
            shown = ", ".join(sorted(metrics)[:30])
            raise ParseError(f"{parser}: primary metric {metric!r} not in the output; found: {shown}",
                             tail=tail, parser=parser, metric=metric, found=metrics)
    # Every value a decision divides by must be a usable ratio term: a throughput of 0
    # (a benchmark that served nothing) is a failed trial, not a measurement of "infinitely slow".
    for name in ([metric] if metric is not None else []) + [m for m in secondary if m != metric]:
        value = metrics.get(name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ParseError(f"{parser}: metric {name} = {value} is not a positive number (not a measurement)",
                             tail=tail, parser=parser, metric=metric, found=metrics)
    return metrics
