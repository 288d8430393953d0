"""A toy serving stack for the serving-session tests: a real stdlib HTTP server on ``--port``.

``GET /health`` answers 200 once ready (``TOY_READY_DELAY`` seconds after start; it prints
"The server is fired up and ready to roll" then), ``GET /generate`` a throughput: 100 times the
factors in the tree it runs in (``knobs.py`` of the toy target, so patches matter) plus a
per-launch offset (``TOY_OFFSETS="0,40"``: launch k gets offset k mod n, counted in
``TOY_STATE_DIR/launches``), with 0.5% noise. Modes (``TOY_SERVER_MODE``): ``normal``,
``never-ready`` (health stays 503), ``ignore-term`` (SIGTERM ignored), ``busy-once`` (the first
launch finds its port taken: a real EADDRINUSE). ``TOY_DIE_AFTER=N``: exits after N generate
requests, as a crashed server does.
"""
import fcntl
import json
import os
import random
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port = int(sys.argv[sys.argv.index("--port") + 1])
mode = os.environ.get("TOY_SERVER_MODE", "normal")
state = os.environ.get("TOY_STATE_DIR", ".")
die_after = int(os.environ.get("TOY_DIE_AFTER", "0"))

os.makedirs(state, exist_ok=True)
counter = os.path.join(state, "launches")
# Two servers start at once under a fleet (two Slurm jobs on one box): count under a lock, else
# one reads the file the other has just truncated.
with open(counter, "a+") as fh:
    fcntl.flock(fh, fcntl.LOCK_EX)
    fh.seek(0)
    launch = int(fh.read() or 0)
    fh.seek(0)
    fh.truncate()
    fh.write(str(launch + 1))
offsets = [float(x) for x in os.environ.get("TOY_OFFSETS", "0").split(",")]
offset = offsets[launch % len(offsets)]

sys.path.insert(0, os.getcwd())
from knobs import FACTORS  # noqa: E402  (the prepared tree's own knobs)

factor = 1.0
for f in FACTORS.values():
    factor *= f

if mode == "ignore-term":
    signal.signal(signal.SIGTERM, lambda *a: print("toy server: SIGTERM ignored", flush=True))
if mode == "busy-once" and not os.path.exists(os.path.join(state, "busy-done")):
    open(os.path.join(state, "busy-done"), "w").write("1")
    squatter = socket.socket()
    squatter.bind(("", port))
    squatter.listen()

started = time.monotonic()
delay = float(os.environ.get("TOY_READY_DELAY", "0.05"))
served = 0
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        global served
        ready = mode != "never-ready" and time.monotonic() - started >= delay
        if self.path == "/health":
            self._send(200 if ready else 503, {"ready": ready})
        elif self.path == "/generate":
            with lock:
                dead = die_after and served >= die_after
            if dead:
                # dying (it exits 50 ms after its last answer): a request in that window gets no
                # answer, as from a crashed server, instead of a reading that races the exit
                self.close_connection = True
                return
            value = (100.0 * factor + offset) * random.gauss(1.0, 0.005)
            self._send(200, {"output_throughput": value, "launch": launch})
            with lock:
                served += 1
                if die_after and served >= die_after:
                    print("fatal: CUDA error: an illegal memory access was encountered (toy)", flush=True)
                    threading.Thread(target=lambda: (time.sleep(0.05), os._exit(1))).start()
        else:
            self._send(404, {})


server = ThreadingHTTPServer(("127.0.0.1", port), Handler)   # busy-once: [Errno 98] Address already in use
print(f"toy server: launch {launch} on port {port}", flush=True)


def announce():
    time.sleep(delay)
    if mode != "never-ready":
        print("The server is fired up and ready to roll!", flush=True)


threading.Thread(target=announce, daemon=True).start()
server.serve_forever()
