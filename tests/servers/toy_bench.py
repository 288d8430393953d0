"""The toy server's benchmark client: one ``GET /generate`` against ``--port``, printed in SGLang
``bench_serving``'s form. ``TOY_BENCH_SLEEP`` seconds of "load" first."""
import json
import os
import sys
import time
import urllib.request

port = int(sys.argv[sys.argv.index("--port") + 1])
time.sleep(float(os.environ.get("TOY_BENCH_SLEEP", "0")))
with urllib.request.urlopen(f"http://127.0.0.1:{port}/generate", timeout=10) as r:
    tput = json.load(r)["output_throughput"]
print("============ Serving Benchmark Result ============")
print(f"{'Successful requests:':<40}{32:<10}")
print(f"{'Output token throughput (tok/s):':<40}{tput:<10.2f}")
print("==================================================")
