"""The vllm-bench-serve builtin parser against a real `vllm bench serve` output.

Sample (tests/data/parsers/vllm_bench_serve_sharegpt.txt): the printed result block of a
published run, `vllm bench serve --backend openai-chat --percentile-metrics ttft,tpot,itl,e2el
--metric-percentiles 50,90,95,99 --save-result --result-dir /tmp --dataset-name sharegpt
--num-prompts 250 --request-rate 0.3 --burstiness 0.7 --result-filename 08-sharegpt.json`
(nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16 on a DGX Spark GB10, report dated
2026-08-06), copied verbatim from a public results page on GitHub, trailing spaces included.
The labels, the frame and the saved JSON's keys are those of vllm-project/vllm
`vllm/benchmarks/serve.py` (commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1): `benchmark()`
prints the block and returns `result`, `main_async()` adds the run's settings and writes it
with one `json.dump` into `--result-dir`, under a dated name unless `--result-filename`.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bisect_lab.parsers import PARSERS, ParseError, parse

DATA = Path(__file__).parent / "data" / "parsers"
SAMPLE = (DATA / "vllm_bench_serve_sharegpt.txt").read_text()

# What the run above saved, in serve.py's shape: main_async's settings first, then
# benchmark()'s result (lists dropped, as without --save-detailed). Constructed, not copied:
# the values are the printed ones with more digits (serve.py writes them unrounded, which is
# why the file wins over the table); the date is illustrative.
SAVED = {
    "date": "20260806-014602", "endpoint_type": "openai-chat", "backend": "openai-chat", "label": None,
    "model_id": "nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16",
    "tokenizer_id": "nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16", "num_prompts": 250,
    "request_rate": 0.3, "burstiness": 0.7, "max_concurrency": None,
    "duration": 841.7519, "completed": 250, "failed": 0, "total_input_tokens": 58416,
    "total_output_tokens": 51153, "request_throughput": 0.29700, "request_goodput": None,
    "output_throughput": 60.77021, "total_token_throughput": 130.16873,
    "max_output_tokens_per_s": 111.0, "max_concurrent_requests": 17, "rtfx": 0.0,
    "mean_ttft_ms": 442.2519, "median_ttft_ms": 432.8417, "p50_ttft_ms": 432.8417,
    "p90_ttft_ms": 588.46, "p95_ttft_ms": 635.37, "p99_ttft_ms": 765.83,
    "mean_e2el_ms": 23244.27, "median_e2el_ms": 13000.71, "p99_e2el_ms": 97520.58,
}


def test_printed_block_names_metrics_with_vllms_json_keys():
    m = parse("vllm-bench-serve", SAMPLE, metric="output_throughput")
    assert m["output_throughput"] == 60.77 and m["total_token_throughput"] == 130.17
    assert m["completed"] == 250 and m["failed"] == 0 and m["request_rate"] == 0.30
    assert m["duration"] == 841.75 and m["total_output_tokens"] == 51153
    assert m["max_output_tokens_per_s"] == 111.0 and m["max_concurrent_requests"] == 17.0
    assert m["median_ttft_ms"] == 432.84 and m["p50_tpot_ms"] == 114.95 and m["p99_itl_ms"] == 287.54
    assert m["mean_e2el_ms"] == 23244.27 and m["p95_e2el_ms"] == 71769.00
    assert m["total_throughput"] == m["total_token_throughput"]     # SGLang's name works too


def test_the_saved_result_in_the_out_folder_wins_over_the_rounded_table(tmp_path):
    # --result-dir {out}: a dated file name, one JSON object on one line
    (tmp_path / "openai-chat-0.3qps-Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16-20260806-014602.json").write_text(
        json.dumps(SAVED))
    m = parse("vllm-bench-serve", SAMPLE, out_dir=str(tmp_path), metric="output_throughput")
    assert m["output_throughput"] == 60.77021 and m["total_token_throughput"] == 130.16873
    assert m["total_throughput"] == 130.16873 and m["num_prompts"] == 250 and m["burstiness"] == 0.7
    assert "max_concurrency" not in m and "label" not in m        # null and text are not metrics
    # the JSON alone (a benchmark that printed nothing we kept) is enough
    assert parse("vllm-bench-serve", "", out_dir=str(tmp_path), metric="output_throughput")["completed"] == 250


def test_speculative_decoding_rows():
    # serve.py's "Speculative Decoding" section (its labels; values of a published MTP run)
    spec = SAMPLE.replace("=" * 50 + "\n", "") + (
        "---------------Speculative Decoding---------------\n"
        "Acceptance rate (%):                     72.29\n"
        "Acceptance length:                       6.06\n"
        "Drafts:                                  5282\n"
        "Draft tokens:                            36974\n"
        "Accepted tokens:                         26729\n"
        "Per-position acceptance (%):\n"
        "  Position 0:                            96.57\n"
        "  Position 1:                            91.40\n"
        + "=" * 50 + "\n")
    m = parse("vllm-bench-serve", spec, metric="spec_decode_acceptance_length")
    assert m["spec_decode_acceptance_length"] == 6.06 == m["accept_length"]
    assert m["spec_decode_acceptance_rate"] == 72.29 and m["spec_decode_num_drafts"] == 5282
    assert m["spec_decode_accepted_tokens"] == 26729
    assert not any(k.startswith("position") for k in m)


def test_infinite_rate_and_failed_runs(tmp_path):
    saved = dict(SAVED, request_rate="inf", completed=0, failed=250, output_throughput=0.0)
    (tmp_path / "r.json").write_text(json.dumps(saved))
    with pytest.raises(ParseError, match="0 successful requests"):
        parse("vllm-bench-serve", "", out_dir=str(tmp_path), metric="output_throughput")
    with pytest.raises(ParseError, match="vllm-bench-serve"):
        parse("vllm-bench-serve", "Traceback (most recent call last):\nboom\n", metric="output_throughput")
    assert "vllm-bench-serve" in PARSERS


def test_sglang_parser_is_unchanged_by_it():
    # the same block read by SGLang's parser keeps SGLang's names (e2e_latency, total_throughput)
    m = parse("sglang-bench-serving", SAMPLE)
    assert m["total_throughput"] == 130.17 and m["mean_e2e_latency_ms"] == 23244.27
    assert "mean_e2el_ms" not in m and math.isclose(m["output_throughput"], 60.77)
