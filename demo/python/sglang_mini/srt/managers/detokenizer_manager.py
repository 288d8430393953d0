"""Detokenizer process: turns output token ids into text, off the scheduler's path.

As in SGLang, it is its own process, spawned by the launcher with the same filtered
environment as the schedulers (so a CPU run has 3 processes: launcher, scheduler,
detokenizer).  It is never in the timed loop.
"""
from __future__ import annotations

import os


def _vocab(n: int) -> list[str]:
    # a deterministic toy vocabulary: syllables, so the text is readable-ish
    cons, vows = "bdfgklmnprstvz", "aeiou"
    return [cons[i % len(cons)] + vows[(i // len(cons)) % len(vows)] + ("" if i % 3 else " ") for i in range(n)]


def run_detokenizer_process(vocab_size: int, ctrl) -> None:
    vocab = _vocab(vocab_size)
    ctrl.send(("ready", {"rank": "detokenizer", "pid": os.getpid(),
                         "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "OEA_"))},
                         "all_reduce": None}))
    try:
        while True:
            cmd, payload = ctrl.recv()
            if cmd == "exit":
                break
            ctrl.send(("text", ["".join(vocab[t % vocab_size] for t in ids) for ids in payload]))
    except (EOFError, KeyboardInterrupt):
        pass
