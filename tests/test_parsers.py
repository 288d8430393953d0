"""Builtin parsers against realistic outputs of several SGLang versions (tests/data/parsers)."""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from bisect_lab.errors import BisectLabError, EXIT_NO_MEASUREMENT, EXIT_USAGE
from bisect_lab.parsers import PARSERS, ParseError, ParserConfigError, parse, validate

DATA = Path(__file__).parent / "data" / "parsers"


def text(name: str) -> str:
    return (DATA / name).read_text()


# --------------------------------------------------------------------------- bench_serving
def test_bench_serving_current_labels():
    m = parse("sglang-bench-serving", text("bench_serving_v0.4.txt"), metric="output_throughput")
    assert m["output_throughput"] == 2832.24
    assert m["request_throughput"] == 2.77
    assert m["input_throughput"] == 1416.12
    assert m["total_throughput"] == 4248.36
    assert m["accept_length"] == 2.31
    assert m["completed"] == 200
    assert m["duration"] == 72.31
    assert m["concurrency"] == 187.42
    assert m["mean_ttft_ms"] == 9523.11
    assert m["median_ttft_ms"] == 9761.30
    assert m["p99_ttft_ms"] == 17702.84
    assert m["median_itl_ms"] == 44.01
    assert m["p95_itl_ms"] == 102.55
    assert m["max_itl_ms"] == 11025.40
    assert m["mean_e2e_latency_ms"] == 67752.07
    assert m["median_e2e_latency_ms"] == 68113.46
    assert m["total_output_tokens_retokenized"] == 204311
    assert math.isinf(m["request_rate"])            # "Traffic request rate: inf"
    assert "max_concurrency" not in m                # "not set" is not a number
    assert "backend" not in m


def test_bench_serving_old_total_throughput_label_and_tpot():
    m = parse("sglang-bench-serving", text("bench_serving_v0.2_total_throughput.txt"),
              metric="total_throughput")
    assert m["total_throughput"] == 2155.45         # "Total throughput (tok/s):"
    assert m["output_throughput"] == 839.00
    assert m["mean_tpot_ms"] == 1.76
    assert m["median_tpot_ms"] == 0.0                # "-0.00"
    assert m["p99_tpot_ms"] == 28.33
    assert m["request_rate"] == 4.0
    assert "accept_length" not in m


def test_bench_serving_total_token_capitalised_and_e2el():
    m = parse("sglang-bench-serving", text("bench_serving_total_token_peak.txt"),
              metric="total_throughput")
    assert m["total_throughput"] == 4843.81         # older "Total Token throughput (tok/s):"
    assert m["max_output_tokens_per_s"] == 2742.00
    assert m["max_concurrency"] == 16                # "Maximum request concurrency:"
    assert m["median_e2e_latency_ms"] == 6560.02     # "Median E2EL (ms):"
    assert m["p99_tpot_ms"] == 7.10


def test_bench_serving_last_block_wins_and_line_prefix_is_stripped():
    m = parse("sglang-bench-serving", text("bench_serving_two_rates_prefixed.txt"),
              metric="output_throughput")
    assert m["output_throughput"] == 424.17
    assert m["request_rate"] == 20.0
    assert m["accept_length"] == 2.31
    assert m["p90_e2e_latency_ms"] == 17903.15
    assert m["total_input_vision_tokens"] == 0
    assert m["median_ttft_ms"] == 130.66             # not the first block's 88.10


def test_bench_offline_throughput_block_has_the_same_shape():
    m = parse("sglang-bench-serving", text("bench_serving_offline_throughput.txt"),
              metric="output_throughput")
    assert m["output_throughput"] == 2545.27
    assert m["last_gen_throughput"] == 6692.56
    assert m["total_throughput"] == 12891.78


def test_bench_serving_label_order_does_not_matter():
    lines = text("bench_serving_v0.4.txt").splitlines()
    start = next(i for i, l in enumerate(lines) if "Serving Benchmark Result" in l)
    body = lines[start + 1:-1]
    shuffled = [lines[start], *reversed(body), lines[-1]]
    m = parse("sglang-bench-serving", "\n".join(shuffled))
    assert m["output_throughput"] == 2832.24 and m["median_ttft_ms"] == 9761.30


def test_bench_serving_output_file_in_out_dir(tmp_path):
    shutil.copy(DATA / "bench_serving_output_file.jsonl", tmp_path / "res.jsonl")
    m = parse("sglang-bench-serving", "", out_dir=str(tmp_path), metric="output_throughput")
    # Two appended runs: the last line is the latest run.
    assert m["output_throughput"] == pytest.approx(2832.2366)
    assert m["accept_length"] == 2.3125
    assert math.isinf(m["request_rate"])             # Infinity
    assert math.isnan(m["std_ttft_ms"])              # NaN
    assert "max_concurrency" not in m                # null


def test_result_files_passed_as_contents_for_remote_hosts():
    jsonl = (DATA / "bench_serving_output_file.jsonl").read_text()
    m = parse("sglang-bench-serving", "", files={"/remote/out/res.jsonl": jsonl}, metric="output_throughput")
    assert m["output_throughput"] == pytest.approx(2832.2366)
    m = parse("json", "", files={"results.json": '{"a": {"b": 2}}'}, metric="a.b")
    assert m == {"a.b": 2.0}
    m = parse("sglang-server-log", "", files={"server.log": text("server_log_no_graph.txt")},
              metric="gen_throughput")
    assert m["cuda_graph"] == 0.0


def test_bench_serving_json_overrides_rounded_text(tmp_path):
    shutil.copy(DATA / "bench_serving_output_file.jsonl", tmp_path / "res.jsonl")
    m = parse("sglang-bench-serving", text("bench_serving_v0.4.txt"), out_dir=str(tmp_path))
    assert m["output_throughput"] == pytest.approx(2832.2366)
    assert m["total_throughput"] == 4248.36          # only in the text: kept


def test_bench_serving_json_lines_on_stdout():
    stdout = "some log line\n" + (DATA / "bench_serving_output_file.jsonl").read_text()
    m = parse("sglang-bench-serving", stdout, metric="median_ttft_ms")
    assert m["median_ttft_ms"] == 9761.3
    assert m["output_throughput"] == pytest.approx(2832.2366)


def test_bench_serving_zero_successful_requests_is_not_a_measurement():
    out = text("bench_serving_v0.4.txt").replace(
        "Successful requests:                     200", "Successful requests:                     0  ")
    with pytest.raises(ParseError, match="0 successful"):
        parse("sglang-bench-serving", out, metric="output_throughput")


def test_bench_serving_infinite_primary_metric_is_rejected(tmp_path):
    rec = {"output_throughput": float("inf"), "request_throughput": 1.0, "completed": 3}
    (tmp_path / "r.jsonl").write_text(json.dumps(rec) + "\n")
    assert "Infinity" in (tmp_path / "r.jsonl").read_text()
    with pytest.raises(ParseError, match="not a measurement"):
        parse("sglang-bench-serving", "", out_dir=str(tmp_path), metric="output_throughput")
    # ... but it is accepted when it is not the primary metric.
    m = parse("sglang-bench-serving", "", out_dir=str(tmp_path), metric="request_throughput")
    assert math.isinf(m["output_throughput"])


def test_bench_serving_stdout_block_found_in_stderr_too():
    m = parse("sglang-bench-serving", "", text("bench_serving_v0.4.txt"))
    assert m["output_throughput"] == 2832.24


# --------------------------------------------------------------------------- bench_one_batch
def test_bench_one_batch_skips_warmup():
    m = parse("sglang-bench-one-batch", text("bench_one_batch_v0.4.txt"),
              metric="decode_median_throughput")
    assert m["prefill_latency_s"] == 0.72352         # not the warmup's 1.02554
    assert m["prefill_throughput"] == 5661.19
    assert m["decode_median_latency_s"] == 0.01823
    assert m["decode_median_throughput"] == 219.43
    assert m["total_latency_s"] == 0.815
    assert m["total_throughput"] == 5050.31
    # SGLang's own result-JSON names for the same numbers
    assert m["median_decode_throughput"] == 219.43
    assert m["overall_throughput"] == 5050.31


def test_bench_one_batch_old_format_last_case():
    m = parse("sglang-bench-one-batch", text("bench_one_batch_v0.2_two_cases.txt"),
              metric="decode_median_throughput")
    assert m["decode_median_throughput"] == 25000.00
    assert m["prefill_latency_s"] == 0.10250
    assert m["total_throughput"] == 35756.52


def test_bench_one_batch_crash_after_warmup_is_a_parse_error():
    out = text("bench_one_batch_crashed_after_warmup.txt")
    with pytest.raises(ParseError) as ei:
        parse("sglang-bench-one-batch", out, metric="decode_median_throughput")
    assert "OutOfMemoryError" in ei.value.tail


def test_bench_one_batch_without_markers_uses_all_lines():
    out = ("Prefill. latency: 0.12345 s, throughput:   1234.56 token/s\n"
           "Decode.  median latency: 0.00500 s, median throughput:    200.00 token/s\n"
           "Total. latency:  0.500 s, throughput:    999.00 token/s\n")
    m = parse("sglang-bench-one-batch", out, metric="decode_median_throughput")
    assert m == pytest.approx({
        "prefill_latency_s": 0.12345, "prefill_latency": 0.12345, "prefill_throughput": 1234.56,
        "decode_median_latency_s": 0.005, "median_decode_latency": 0.005,
        "decode_median_throughput": 200.0, "median_decode_throughput": 200.0,
        "total_latency_s": 0.5, "total_latency": 0.5, "total_throughput": 999.0,
        "overall_throughput": 999.0})


def test_bench_one_batch_result_file(tmp_path):
    rec = {"run_name": "before", "batch_size": 1, "input_len": 1024, "output_len": 16,
           "prefill_latency": 0.0612, "prefill_throughput": 16732.1, "median_decode_latency": 0.00711,
           "median_decode_throughput": 140.64, "total_latency": 0.168, "overall_throughput": 6190.4}
    (tmp_path / "result.jsonl").write_text(json.dumps(rec) + "\n")
    m = parse("sglang-bench-one-batch", text("bench_one_batch_v0.4.txt"), out_dir=str(tmp_path))
    assert m["decode_median_throughput"] == 140.64
    assert m["total_latency_s"] == 0.168


# --------------------------------------------------------------------------- bench_one_batch_server
def test_bench_one_batch_server_last_case_and_trailing_space():
    m = parse("sglang-bench-one-batch-server", text("bench_one_batch_server_v0.4.txt"),
              metric="last_gen_throughput")
    assert m["batch_size"] == 16
    assert m["output_throughput"] == 783.50
    assert m["last_gen_throughput"] == 801.44
    assert m["acc_length"] == 2.27                   # "acc_length: 2.27 " (trailing space)
    assert m["accept_length"] == 2.27
    assert m["last_ttft"] == 0.53
    assert m["latency"] == 21.10
    assert m["input_throughput"] == 30871.33
    assert m["cache_hit_rate"] == 0.0


def test_bench_one_batch_server_older_labels():
    m = parse("sglang-bench-one-batch-server", text("bench_one_batch_server_v0.3.txt"),
              metric="output_throughput")
    assert m["output_throughput"] == 28.31
    assert m["last_gen_throughput"] == 30.98
    assert m["ttft"] == 0.09
    assert "accept_length" not in m


def test_bench_one_batch_server_header_only_is_an_error():
    with pytest.raises(ParseError):
        parse("sglang-bench-one-batch-server", "batch size: 1\ninput_len: 1024\noutput_len: 16\n")


# --------------------------------------------------------------------------- server log
def test_server_log_eagle_medians_and_cuda_graph():
    m = parse("sglang-server-log", "", text("server_log_eagle.txt"), metric="gen_throughput")
    assert m["gen_throughput"] == 82.70              # median of 5 decode lines
    assert m["accept_length"] == 2.31
    assert m["cuda_graph"] == 1.0                    # the Prefill line's "False" does not count
    assert m["decode_log_lines"] == 5


def test_server_log_without_cuda_graph():
    m = parse("sglang-server-log", text("server_log_no_graph.txt"), metric="gen_throughput")
    assert m["cuda_graph"] == 0.0
    assert m["gen_throughput"] == 60.05
    assert m["accept_length"] == 2.10


def test_server_log_old_version_and_log_file_in_out_dir(tmp_path):
    shutil.copy(DATA / "server_log_v0.2.txt", tmp_path / "server.log")
    m = parse("sglang-server-log", "benchmark done\n", out_dir=str(tmp_path), metric="gen_throughput")
    assert m["gen_throughput"] == 2150.34
    assert "cuda_graph" not in m and "accept_length" not in m


# --------------------------------------------------------------------------- regex
def test_regex_last_match_wins():
    out = "tok/s: 10.5\nwarm\ntok/s: 12.25\nlatency = 3e-2 s\n"
    m = parse("regex", out, patterns={"tps": r"tok/s:\s+([0-9.]+)", "lat": r"latency = (\S+) s"},
              metric="tps")
    assert m == {"tps": 12.25, "lat": 0.03}


def test_regex_falls_back_to_stderr_and_ignores_non_numbers():
    m = parse("regex", "tps: n/a\n", "INFO tps: 7\n", patterns={"tps": r"tps: (\S+)"})
    assert m == {"tps": 7.0}


def test_regex_bad_patterns_are_usage_errors():
    with pytest.raises(ParserConfigError, match="one group"):
        parse("regex", "x", patterns={"a": r"\d+"})
    with pytest.raises(ParserConfigError, match="invalid regex"):
        validate("regex", {"a": r"(\d+"})
    with pytest.raises(ParserConfigError, match="patterns"):
        validate("regex", None)
    assert ParserConfigError("x").exit_code == EXIT_USAGE


def test_regex_no_match_is_a_parse_error():
    with pytest.raises(ParseError, match="no pattern matched"):
        parse("regex", "hello\n", patterns={"a": r"tps: (\d+)"})


# --------------------------------------------------------------------------- json
def test_json_last_object_line_flattened():
    out = ('{"throughput": 1}\nnoise\n'
           '{"throughput": 95.5, "lat": {"p50": 1.5, "p99": 9}, "ok": true, "name": "x", '
           '"runs": [1, 2], "bad": NaN}\n')
    m = parse("json", out, metric="throughput")
    assert m["throughput"] == 95.5
    assert m["lat.p50"] == 1.5 and m["lat.p99"] == 9
    assert m["ok"] == 1.0 and m["runs.1"] == 2
    assert "name" not in m and math.isnan(m["bad"])


def test_json_pretty_printed_document():
    doc = json.dumps({"results": [{"tps": 1.0}, {"tps": 2.0}], "summary": {"tps": 1.5}}, indent=2)
    m = parse("json", "starting\n" + doc + "\n", metric="summary.tps")
    assert m["summary.tps"] == 1.5 and m["results.1.tps"] == 2.0


def test_json_results_file_in_out_dir(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"tps": 42.0}))
    m = parse("json", '{"tps": 1}\n', out_dir=str(tmp_path), metric="tps")
    assert m["tps"] == 42.0


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("parser", [p for p in PARSERS if p != "regex"])
@pytest.mark.parametrize("stdout", ["", "\n\n", "Traceback (most recent call last):\nboom\n",
                                    "\x00\xff garbage ::: 1.2.3 :: nan\n" * 50,
                                    "==== Serving Benchmark Result ====\n=====================\n"])
def test_garbage_and_empty_output_raise_parse_error(parser, stdout, tmp_path):
    with pytest.raises(ParseError) as ei:
        parse(parser, stdout, "stderr text", out_dir=str(tmp_path), metric="x")
    err = ei.value
    assert isinstance(err, BisectLabError) and err.exit_code == EXIT_NO_MEASUREMENT
    assert len(err.tail.splitlines()) <= 20
    assert "\n" not in str(err)                      # one line for the CLI


def test_missing_primary_metric_names_what_was_found():
    with pytest.raises(ParseError) as ei:
        parse("sglang-bench-serving", text("bench_serving_v0.4.txt"), metric="output_thruput")
    assert "output_throughput" in str(ei.value)
    assert "output_throughput" in ei.value.found
    assert "=====" in ei.value.tail


def test_tail_is_last_20_lines_of_stdout_or_stderr():
    out = "\n".join(f"line {i}" for i in range(100))
    with pytest.raises(ParseError) as ei:
        parse("sglang-bench-serving", out, "err")
    assert ei.value.tail.splitlines() == [f"line {i}" for i in range(80, 100)]
    with pytest.raises(ParseError) as ei:
        parse("sglang-bench-serving", "", "only stderr\nCUDA error")
    assert ei.value.tail.endswith("CUDA error")


def test_unknown_parser():
    with pytest.raises(ParserConfigError, match="sglang-bench-serving"):
        parse("sglang-bench-serve", "x")


def test_all_sample_files_parse_with_some_builtin_parser():
    # Guards the data folder: every sample is realistic enough for its parser.
    owner = {"bench_serving": "sglang-bench-serving", "bench_one_batch_server": "sglang-bench-one-batch-server",
             "bench_one_batch": "sglang-bench-one-batch", "server_log": "sglang-server-log",
             "vllm_bench_serve": "vllm-bench-serve"}
    for f in sorted(os.listdir(DATA)):
        parser = next(p for prefix, p in owner.items() if f.startswith(prefix))
        if "crashed" in f:
            continue
        assert parse(parser, text(f)), f


@pytest.mark.parametrize("value", [0.0, -5.0, float("nan"), float("inf")])
def test_a_primary_metric_that_is_not_a_positive_number_is_not_a_measurement(value, tmp_path):
    rec = {"output_throughput": value, "median_ttft_ms": 10.0, "completed": 3}
    (tmp_path / "r.jsonl").write_text(json.dumps(rec) + "\n")
    with pytest.raises(ParseError, match=f"metric output_throughput = {value} is not a positive number"):
        parse("sglang-bench-serving", "", out_dir=str(tmp_path), metric="output_throughput")


def test_secondary_metrics_must_be_positive_when_present(tmp_path):
    rec = {"output_throughput": 100.0, "median_ttft_ms": 0.0, "mean_itl_ms": 0.0, "completed": 3}
    (tmp_path / "r.jsonl").write_text(json.dumps(rec) + "\n")
    kw = dict(out_dir=str(tmp_path), metric="output_throughput")
    with pytest.raises(ParseError, match="metric median_ttft_ms = 0.0 is not a positive number"):
        parse("sglang-bench-serving", "", secondary=["median_ttft_ms"], **kw)
    # a metric nothing compares may be zero; a secondary the output lacks is left to the summary's warning
    assert parse("sglang-bench-serving", "", secondary=["p99_e2el_ms"], **kw)["mean_itl_ms"] == 0.0
