"""All-reduce among the tensor-parallel workers: the stand-in for NCCL.

The ranks share a small shared-memory segment (one data buffer and one sequence flag per
rank, double-buffered).  A waiting rank spins on the peer's flag for a few microseconds,
then sleeps on a semaphore the peer posts after every publish: on an idle machine the
peer is almost always there within the spin (a pipe round trip would cost ~100 us), and
on a busy one the waiter gives its core away instead of burning it.

The algorithm follows NCCL-style environment variables **as the worker process sees
them** (NCCL reads its env in each rank, too): ``NCCL_ALGO`` = Ring (default) or Tree,
``NCCL_PROTO`` = Simple (default), LL or LL128.  A variable set in the launching shell
only takes effect if it reached the worker's environment.

* Ring (2 ranks): reduce-scatter then all-gather; each rank reduces one half, two syncs.
* Tree (2 ranks): rank 1 sends up, rank 0 reduces the whole buffer and publishes the
  result, rank 1 copies it down.
* Simple: a separate flag tells the peer the buffer is complete.  LL / LL128: every data
  line carries its own flag (8-byte lines of 4 data + 4 flag bytes), so the reader polls
  the data itself: twice the bytes, no separate flag.

Whatever the algorithm, every rank ends up with bit-identical sums (always buf0 + buf1).
"""
from __future__ import annotations

import os

import numpy as np

_ALGOS = {"ring": "ring", "tree": "tree"}
_PROTOS = {"simple": "Simple", "ll": "LL", "ll128": "LL128"}
MAX_FLOATS = 1 << 16          # largest all-reduce: prefill of 512 tokens x 128 hidden


def select_algorithm(environ=None) -> tuple[str, str]:
    """(algorithm, protocol) from NCCL_ALGO / NCCL_PROTO; unknown values fall back like NCCL."""
    env = os.environ if environ is None else environ
    algo = _ALGOS.get(env.get("NCCL_ALGO", "").strip().lower(), "ring")
    proto = _PROTOS.get(env.get("NCCL_PROTO", "").strip().lower(), "Simple")
    return algo, proto


SPIN = 20                     # flag polls before sleeping on the semaphore


def create_shared_buffers(ctx, world_size: int):
    """Shared memory for one communicator group; pass the result to every rank."""
    if world_size == 1:
        return None
    # [rank, parity, 4 * MAX_FLOATS]: an input region and a reduced-result region, each
    # big enough for LL lines (value, flag) as well as Simple
    data = ctx.RawArray("f", world_size * 2 * 4 * MAX_FLOATS)
    # flags: [rank, kind] kind 0 = "my input is published", 1 = "my reduced part is published"
    flags = ctx.RawArray("q", world_size * 2 * 8)      # padded to separate cache lines
    # one semaphore per (publisher rank, kind): posted once per publish, taken once per wait
    sems = [[ctx.Semaphore(0) for _ in range(2)] for _ in range(world_size)]
    return data, flags, sems


class Communicator:
    def __init__(self, rank: int, world_size: int, shared=None, environ=None):
        self.rank, self.world_size = rank, world_size
        self.algo, self.proto = select_algorithm(environ)
        self.seq = 0
        if world_size > 1:
            data, flags, self.sems = shared
            self.data = np.frombuffer(data, np.float32).reshape(world_size, 2, 4 * MAX_FLOATS)
            self.flags = np.frombuffer(flags, np.int64).reshape(world_size, 2, 8)

    def describe(self) -> str:
        return f"{self.algo}/{self.proto} (tp={self.world_size})"

    # -- one-sided publish / wait ------------------------------------------------------
    def _publish(self, kind: int, values: np.ndarray, offset: int = 0) -> None:
        buf = self.data[self.rank, self.seq & 1]
        n = values.size
        if self.proto == "Simple":
            buf[offset:offset + n] = values
            self.flags[self.rank, kind, 0] = self.seq          # x86 keeps store order
        else:
            lines = buf[2 * offset:2 * (offset + n)].reshape(n, 2)
            lines[:, 0] = values
            lines[:, 1] = np.float32(self.seq * 2 + kind)       # flag travels with the data
        self.sems[self.rank][kind].release()

    def _wait(self, peer: int, kind: int, n: int, offset: int = 0) -> np.ndarray:
        buf = self.data[peer, self.seq & 1]
        if self.proto == "Simple":
            flag = self.flags[peer, kind]
            for _ in range(SPIN):
                if flag[0] >= self.seq:
                    break
            # taken in any case: the peer posts once per publish (right after the flag)
            self.sems[peer][kind].acquire()
            return buf[offset:offset + n]
        lines = buf[2 * offset:2 * (offset + n)].reshape(n, 2)
        want = np.float32(self.seq * 2 + kind)
        for _ in range(SPIN):
            if (lines[:, 1] == want).all():
                break
        self.sems[peer][kind].acquire()
        while not (lines[:, 1] == want).all():     # LL: the data lines are the completion
            os.sched_yield()
        return lines[:, 0]

    # -- collectives -------------------------------------------------------------------
    def all_reduce(self, x: np.ndarray) -> np.ndarray:
        """Sum ``x`` over the ranks; every rank gets the same, bit-identical result."""
        if self.world_size == 1:
            return x
        self.seq += 1
        flat = np.ascontiguousarray(x, np.float32).reshape(-1)
        n = flat.size
        if n > MAX_FLOATS:
            raise ValueError(f"all_reduce of {n} floats exceeds the {MAX_FLOATS}-float buffer")
        peer = 1 - self.rank
        out = np.empty(n, np.float32)
        if self.algo == "tree":
            if self.rank == 1:
                self._publish(0, flat)
                out[:] = self._wait(0, 1, n, offset=MAX_FLOATS)
            else:
                out[:] = flat + self._wait(1, 0, n)
                self._publish(1, out, offset=MAX_FLOATS)
            return out.reshape(x.shape)
        # ring: publish everything, reduce my half, exchange reduced halves
        half = (n + 1) // 2
        lo, hi = (0, half) if self.rank == 0 else (half, n)
        plo, phi = (half, n) if self.rank == 0 else (0, half)
        self._publish(0, flat)
        other = self._wait(peer, 0, n)
        mine = slice(lo, hi)
        out[mine] = (flat[mine] + other[mine]) if self.rank == 0 else (other[mine] + flat[mine])
        self._publish(1, out[mine], offset=MAX_FLOATS + lo)
        out[plo:phi] = self._wait(peer, 1, phi - plo, offset=MAX_FLOATS + plo)
        return out.reshape(x.shape)

    def barrier(self) -> None:
        if self.world_size > 1:
            self.all_reduce(np.zeros(2, np.float32))
