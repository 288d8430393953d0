"""GPU model runner (torch): the same model family on CUDA, with CUDA graphs.

Decode, the EAGLE-3 draft chain and target-verify are captured once as CUDA graphs over
static buffers (a contiguous KV cache of max_seq_len, masked by position), then replayed
each step: at batch 1 the step is launch-bound, and graph replay removes the launches.
Prefill, and any mode the attention backend says is not capturable, runs eagerly (the
"extend" path), as in SGLang.

What the attention backend allows comes from ``layers/attention/mla_backend.py``: its
``KV_LAYOUT`` (contiguous, or the paged gather-then-cast layout) and ``can_run_graph``.
The torch runner does not import numpy model code; weights come from a seeded torch
generator on the device (different numbers from the CPU model, same structure).

Tensor parallelism (``tp_size`` > 1) is expert parallelism, as in the CPU model: one
process per GPU, attention replicated, each rank owning ``num_experts / tp`` experts, and
the MoE output summed over the ranks with a torch.distributed all-reduce (NCCL on GPUs, gloo
on CPU), captured inside the CUDA graphs like the rest of the step. NCCL reads its
configuration (NCCL_ALGO, NCCL_PROTO, NCCL_P2P_LEVEL, ...) from each rank's own
environment, so only variables that reached the worker processes change what it does.
"""
from __future__ import annotations

import datetime
import math
import os
import time

import torch
import torch.distributed as dist

from ..layers.attention import mla_backend
from ..layers.moe import topk as topk_mod
from ..models.kimi_k25 import KimiK25ForConditionalGeneration

DTYPE = torch.bfloat16
GRAPH_WARMUP = 3


def _rms_norm(x):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


class _Weights:
    """Seeded weights on the device, shaped like the CPU model's (see deepseek_v2.init_weights).

    Every rank draws the same full set (same seed) and keeps its experts' slice of the MoE.
    """

    def __init__(self, a, device, rank: int = 0, tp: int = 1):
        from ..models.deepseek_v2 import RESIDUAL_SCALE
        g = torch.Generator(device=device).manual_seed(a.seed)
        H, V, L, E, F = a.hidden_size, a.vocab_size, a.num_layers, a.num_experts, a.moe_intermediate_size
        nh, dh, R = a.num_heads, a.head_dim, a.kv_lora_rank
        # Logit margins grow like sqrt(H): scale the residual pushes along, so that the
        # draft/target agreement (accept length) stays in the same range as on CPU.
        # More layers add more pushes: scale each by sqrt(3 / L) (3 = the CPU model's depth).
        gain = math.sqrt(H / 64.0)
        # 0.75: tuned on the GPU shape for an accept length of ~2.5 (override to retune)
        layer_gain = math.sqrt(3.0 / L) * float(os.environ.get("SGLANG_MINI_RESIDUAL_GAIN", "0.75"))

        def mat(*shape, fan_in, scale=1.0):
            w = torch.randn(*shape, generator=g, device=device, dtype=torch.float32)
            return (w * (scale / math.sqrt(fan_in))).to(DTYPE)

        emb = torch.randn(V, H, generator=g, device=device, dtype=torch.float32)
        emb = emb * (math.sqrt(H) / emb.norm(dim=1, keepdim=True))
        perm = torch.randperm(V, generator=g, device=device)
        inv = torch.argsort(perm)
        self.embed = emb.to(DTYPE)
        self.lm_head = (emb[inv] / math.sqrt(H)).to(DTYPE)          # [V, H]
        s = RESIDUAL_SCALE * gain * layer_gain
        self.layers = []
        for _ in range(L):
            self.layers.append(dict(
                q=mat(H, nh * dh, fan_in=H), kv_a=mat(H, R, fan_in=H),
                k_b=mat(nh, dh, R, fan_in=dh), v_b=mat(nh, R, dh, fan_in=R),
                o=mat(nh * dh, H, fan_in=nh * dh, scale=s),
                gate=mat(H, E, fan_in=H, scale=4.0),
                w1=mat(E, H, F, fan_in=H), w2=mat(E, F, H, fan_in=F, scale=s * 2.0)))
        lo, hi = rank * E // tp, (rank + 1) * E // tp
        for lw in self.layers:
            lw["w1"], lw["w2"] = lw["w1"][lo:hi].clone(), lw["w2"][lo:hi].clone()
        self.experts = slice(lo, hi)
        self.draft = dict(fc=mat(3 * H, H, fan_in=3 * H, scale=0.3 * gain), w1=mat(H, 2 * H, fan_in=H),
                          w2=mat(2 * H, H, fan_in=2 * H, scale=0.9 * gain))


class _KVCache:
    """Contiguous [L, max_len, R] in the compute dtype, or the patched paged fp16 layout."""

    def __init__(self, a, device):
        self.layout = mla_backend.KV_LAYOUT
        L, S, R = a.num_layers, a.max_seq_len, a.kv_lora_rank
        if self.layout == "contiguous":
            self.buf = torch.zeros(L, S, R, dtype=DTYPE, device=device)
        else:
            # gather-then-cast: half-precision pages + page table; reads gather the
            # sequence's pages into a fresh buffer and cast it to the compute dtype
            self.page = int(getattr(mla_backend, "PAGE_SIZE", 16))
            n_pages = -(-S // self.page)
            self.pages = torch.zeros(L, n_pages, self.page, R, dtype=torch.float16, device=device)
            self.page_table = torch.arange(n_pages - 1, -1, -1, device=device)

    def write(self, layer, positions, c):
        if self.layout == "contiguous":
            self.buf[layer].index_copy_(0, positions, c.to(DTYPE))
        else:
            pg = self.page_table[positions // self.page]
            self.pages[layer][pg, positions % self.page] = c.to(torch.float16)

    def read(self, layer, end: int):
        if self.layout == "contiguous":
            return self.buf[layer, :end]
        n = -(-end // self.page)
        gathered = self.pages[layer].index_select(0, self.page_table[:n])
        return gathered.reshape(-1, gathered.shape[-1])[:end].to(DTYPE)


def _line_buffered_c_stdout() -> None:
    """NCCL logs with C stdio. All ranks share the benchmark's stdout, and block-buffered
    writes split lines between ranks ("Init COMPLETE" of one rank lost inside another's
    block); one write per line keeps every line whole."""
    import ctypes
    try:
        libc = ctypes.CDLL(None)
        libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, 1, 0)     # 1 = _IOLBF
    except (OSError, ValueError, AttributeError):
        pass          # not glibc: lines may interleave, nothing worse


class TorchModelRunner:
    def __init__(self, args, rank: int):
        if not torch.cuda.is_available() and args.device == "cuda":
            raise RuntimeError("--device cuda but torch sees no GPU")
        self.args = a = args
        self.rank, self.tp = rank, max(1, a.tp_size)
        if torch.cuda.is_available() and a.device == "cuda":
            if torch.cuda.device_count() < self.tp:
                raise RuntimeError(f"--tp-size {self.tp} needs {self.tp} GPUs; torch sees "
                                   f"{torch.cuda.device_count()}")
            self.device = torch.device("cuda", rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        if self.tp > 1:
            # Rank 0 hosts the rendezvous store; once it has left, the other ranks' NCCL
            # heartbeat monitor would poll the dead store for seconds, holding up shutdown.
            os.environ.setdefault("TORCH_NCCL_ENABLE_MONITORING", "0")
            if os.environ.get("NCCL_DEBUG"):
                _line_buffered_c_stdout()
            cuda = self.device.type == "cuda"
            # device_id: create the NCCL communicator now, before any graph capture
            dist.init_process_group("nccl" if cuda else "gloo", init_method=a.dist_init_addr,
                                    rank=rank, world_size=self.tp,
                                    timeout=datetime.timedelta(seconds=120),
                                    device_id=self.device if cuda else None)
        torch.manual_seed(a.seed)
        self.w = _Weights(a, self.device, rank, self.tp)
        self.cache = _KVCache(a, self.device)
        self.scale = 1.0 / math.sqrt(a.head_dim + a.kv_lora_rank)
        backend = mla_backend.MLAAttentionBackend(1, 1, 1, 1)     # just for its capability table
        # modes that may take the static (capturable) path; captured only on CUDA
        self.can_graph = {m: (not a.disable_cuda_graph and backend.can_run_graph(m)
                              and self.cache.layout == "contiguous") for m in ("decode", "target_verify")}
        self.spec = a.speculative_algorithm == "EAGLE3"
        if self.spec:
            from ..speculative.eagle_worker import check_eagle3_support
            check_eagle3_support(KimiK25ForConditionalGeneration)
            n = a.num_layers
            self.capture_layers = [0, n // 2, n - 1]
        else:
            self.capture_layers = []
        self.k = a.speculative_num_steps
        self.oea = bool(getattr(topk_mod, "OEA_ENABLE", False))
        self.graphs = {}
        self._capture_graphs()

    def describe_comm(self) -> str:
        if self.tp == 1:
            return "none (tp=1)"
        if self.device.type != "cuda":
            return f"gloo (tp={self.tp})"
        # what this rank's environment asks NCCL for ("auto": NCCL's own tuning decides)
        algo = os.environ.get("NCCL_ALGO") or "auto"
        proto = os.environ.get("NCCL_PROTO") or "auto"
        return f"nccl/{algo}/{proto} (tp={self.tp})"

    def close(self) -> None:
        if self.tp > 1 and dist.is_initialized():
            dist.barrier()                 # nobody leaves while a peer still reduces
            dist.destroy_process_group()
        # NCCL writes its NCCL_DEBUG lines with C stdio, and a spawned worker ends in
        # os._exit, which drops whatever is still buffered (rank 0's "Init COMPLETE" was lost)
        import ctypes
        ctypes.CDLL(None).fflush(None)

    def _all_reduce(self, x):
        if self.tp > 1:
            dist.all_reduce(x)
        return x

    # -- model pieces --------------------------------------------------------------------
    def _route(self, x, lw):
        probs = torch.softmax((x @ lw["gate"]).float(), dim=-1)                  # [T, E]
        top = torch.topk(probs, self.args.top_k, dim=-1)
        ids = top.indices
        if self.oea and self.args.top_k > 1:
            # OEA: keep each token's first choice, fill the second slot from experts the
            # batch already activated (fall back to its own second choice)
            first = ids[:, :1]
            active = torch.zeros_like(probs, dtype=torch.bool).scatter_(1, first, True).any(0, keepdim=True)
            cand = probs.masked_fill(~active, -1.0).scatter(1, first, -1.0)
            best = cand.max(-1, keepdim=True)
            second = torch.where(best.values > 0, best.indices, ids[:, 1:2])
            ids = torch.cat([first, second], dim=1)
        w = probs.gather(1, ids)
        w = w / w.sum(-1, keepdim=True)
        return torch.zeros_like(probs).scatter_(1, ids, w).to(DTYPE)             # dense [T, E]

    def _moe(self, x, lw):
        """This rank's experts' share of the MoE output, summed over the ranks."""
        route = self._route(x, lw)[:, self.w.experts]
        h1 = torch.nn.functional.silu(torch.einsum("th,ehf->tef", x, lw["w1"]))
        y = torch.einsum("tef,efh->teh", h1, lw["w2"])
        return self._all_reduce(torch.einsum("te,teh->th", route, y).contiguous())

    def _attn_static(self, i, x, positions):
        """Graph-capturable: fixed shapes, whole cache, positions masked."""
        a, lw = self.args, self.w.layers[i]
        t = x.shape[0]
        q = (x @ lw["q"]).view(t, a.num_heads, a.head_dim)
        q_lat = torch.einsum("thd,hdr->thr", q, lw["k_b"])
        self.cache.write(i, positions, x @ lw["kv_a"])
        kv = self.cache.buf[i]                                                    # [S, R]
        scores = torch.einsum("thr,sr->ths", q_lat, kv).float() * self.scale
        s = torch.arange(kv.shape[0], device=x.device)
        scores = scores.masked_fill((s[None, :] > positions[:, None])[:, None, :], float("-inf"))
        o_lat = torch.einsum("ths,sr->thr", torch.softmax(scores, -1).to(DTYPE), kv)
        return torch.einsum("thr,hrd->thd", o_lat, lw["v_b"]).reshape(t, -1) @ lw["o"]

    def _attn_extend(self, i, x, start: int):
        """Eager: attention over the cache prefix read back (gathered+cast if paged)."""
        a, lw = self.args, self.w.layers[i]
        t = x.shape[0]
        positions = torch.arange(start, start + t, device=x.device)
        q = (x @ lw["q"]).view(t, a.num_heads, a.head_dim)
        q_lat = torch.einsum("thd,hdr->thr", q, lw["k_b"])
        self.cache.write(i, positions, x @ lw["kv_a"])
        outs = []
        for j in range(t):                       # extend: one query token at a time
            kv = self.cache.read(i, start + j + 1)
            p = torch.softmax(torch.einsum("hr,sr->hs", q_lat[j], kv).float() * self.scale, -1)
            outs.append(p.to(DTYPE) @ kv)
        o_lat = torch.stack(outs)
        return torch.einsum("thr,hrd->thd", o_lat, lw["v_b"]).reshape(t, -1) @ lw["o"]

    def _forward(self, tokens, positions=None, start=None):
        """tokens [T] -> (final hidden [T, H] normed, aux [T, 3H] or None)."""
        h = self.w.embed.index_select(0, tokens)
        aux = []
        for i, lw in enumerate(self.w.layers):
            x = _rms_norm(h)
            h = h + (self._attn_static(i, x, positions) if positions is not None else self._attn_extend(i, x, start))
            h = h + self._moe(_rms_norm(h), lw)
            if i in self.capture_layers:
                aux.append(h)
        return _rms_norm(h), (torch.cat(aux, -1) if aux else None)

    def _draft(self, token, aux_row):
        """EAGLE-3 chain of k draft tokens (tensor ops only: capturable)."""
        d = self.w.draft
        g = aux_row @ d["fc"]
        out = []
        for _ in range(self.k):
            # index_select, not embed[token]: a 0-d index tensor would be read back to the
            # host (.item()), which is not allowed while a CUDA graph is being captured
            x = self.w.embed.index_select(0, token.reshape(1))[0] + g
            h = x + torch.nn.functional.silu(_rms_norm(x) @ d["w1"]) @ d["w2"]
            token = (_rms_norm(h) @ self.w.lm_head.T).argmax(-1)
            out.append(token)
            g = h - x
        return torch.stack(out).view(-1)

    # -- static-buffer step functions (captured as graphs on CUDA) -------------------------
    def _step_verify(self):
        hidden, aux = self._forward(self.sv_tokens, positions=self.sv_start + self.ar_v)
        self.sv_preds.copy_((hidden @ self.w.lm_head.T).argmax(-1))
        self.sv_aux.copy_(aux)

    def _step_decode(self):
        hidden, _ = self._forward(self.sd_tokens, positions=self.sd_start + self.ar_d)
        self.sd_preds.copy_((hidden @ self.w.lm_head.T).argmax(-1))

    def _step_draft(self):
        self.sdr_out.copy_(self._draft(self.sdr_token, self.sdr_aux))

    def _capture_graphs(self):
        dev, a, H = self.device, self.args, self.args.hidden_size
        T = self.k + 1
        self.ar_v = torch.arange(T, device=dev)
        self.ar_d = torch.arange(1, device=dev)
        self.sv_tokens = torch.zeros(T, dtype=torch.long, device=dev)
        self.sv_start = torch.zeros((), dtype=torch.long, device=dev)
        self.sv_preds = torch.zeros(T, dtype=torch.long, device=dev)
        self.sv_aux = torch.zeros(T, 3 * H, dtype=DTYPE, device=dev)
        self.sd_tokens = torch.zeros(1, dtype=torch.long, device=dev)
        self.sd_start = torch.zeros((), dtype=torch.long, device=dev)
        self.sd_preds = torch.zeros(1, dtype=torch.long, device=dev)
        self.sdr_token = torch.zeros((), dtype=torch.long, device=dev)
        self.sdr_aux = torch.zeros(3 * H, dtype=DTYPE, device=dev)
        self.sdr_out = torch.zeros(self.k, dtype=torch.long, device=dev)
        if dev.type != "cuda" or a.disable_cuda_graph:
            return
        todo = {"draft": self._step_draft} if self.spec else {}
        if self.spec and self.can_graph["target_verify"]:
            todo["verify"] = self._step_verify
        if not self.spec and self.can_graph["decode"]:
            todo["decode"] = self._step_decode
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for fn in todo.values():
                for _ in range(GRAPH_WARMUP):
                    fn()
        torch.cuda.current_stream().wait_stream(stream)
        pool = None
        for name, fn in todo.items():
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                fn()
            pool = g.pool()
            self.graphs[name] = g
        torch.cuda.synchronize()
        if self.tp > 1:
            dist.barrier(device_ids=[self.device.index])

    # -- decoding ----------------------------------------------------------------------
    @torch.inference_mode()
    def _verify(self, tokens: list[int], start: int):
        if "verify" in self.graphs:
            self.sv_tokens.copy_(torch.tensor(tokens), non_blocking=True)
            self.sv_start.fill_(start)
            self.graphs["verify"].replay()
            return self.sv_preds.tolist(), self.sv_aux, "fast"
        if self.can_graph["target_verify"]:
            # torch on CPU: the same static code, with no graph to replay
            self.sv_tokens.copy_(torch.tensor(tokens))
            self.sv_start.fill_(start)
            self._step_verify()
            return self.sv_preds.tolist(), self.sv_aux, "fast"
        hidden, aux = self._forward(torch.tensor(tokens, device=self.device), start=start)
        return (hidden @ self.w.lm_head.T).argmax(-1).tolist(), aux, "extend"

    @torch.inference_mode()
    def _decode(self, token: int, start: int):
        if "decode" in self.graphs:
            self.sd_tokens.fill_(token)
            self.sd_start.fill_(start)
            self.graphs["decode"].replay()
            return self.sd_preds.item(), "fast"
        if self.can_graph["decode"]:
            self.sd_tokens.fill_(token)
            self.sd_start.fill_(start)
            self._step_decode()
            return self.sd_preds.item(), "fast"
        hidden, _ = self._forward(torch.tensor([token], device=self.device), start=start)
        return int((hidden @ self.w.lm_head.T).argmax(-1).item()), "extend"

    @torch.inference_mode()
    def _propose(self, token: int, aux_row):
        self.sdr_token.fill_(token)
        self.sdr_aux.copy_(aux_row)
        if "draft" in self.graphs:
            self.graphs["draft"].replay()
        else:
            self._step_draft()
        return self.sdr_out.tolist()

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    @torch.inference_mode()
    def generate(self, prompt: list[int], max_new_tokens: int) -> dict:
        t0 = time.perf_counter()
        hidden, aux = self._forward(torch.tensor(prompt, device=self.device), start=0)
        last = int((hidden[-1] @ self.w.lm_head.T).argmax().item())
        ttft = time.perf_counter() - t0
        out, seq_len, itl, steps, path = [last], len(prompt), [], 0, None
        aux_row = aux[-1].clone() if aux is not None else None
        while len(out) < max_new_tokens:
            ts = time.perf_counter()
            if self.spec:
                drafts = self._propose(last, aux_row)
                preds, aux_v, path = self._verify([last] + drafts, seq_len)
                j = 0
                while j < len(drafts) and drafts[j] == preds[j]:
                    j += 1
                new = drafts[:j] + [preds[j]]
                seq_len += j + 1
                aux_row = aux_v[j].clone()
            else:
                nxt, path = self._decode(last, seq_len)
                new, seq_len = [nxt], seq_len + 1
            last = new[-1]
            out.extend(new)
            steps += 1
            itl.append(time.perf_counter() - ts)
            if seq_len + self.k + 1 >= self.args.max_seq_len:
                break
        self._sync()
        n = min(len(out), max_new_tokens)
        return {"ttft": ttft, "latency": time.perf_counter() - t0, "itl": itl, "output_len": n,
                "input_len": len(prompt), "steps": steps, "verify_path": path, "accepted": len(out) - 1,
                "output_ids": out[:n]}

    def run_workload(self, wl: dict) -> dict:
        for p in wl["warmup_prompts"]:
            self.generate(p, wl["output_len"])
        self._sync()
        t0 = time.perf_counter()
        reqs = [self.generate(p, wl["output_len"]) for p in wl["prompts"]]
        self._sync()
        duration = time.perf_counter() - t0
        used = ("verify" if self.spec else "decode") in self.graphs
        return {"duration": duration, "requests": reqs, "device": self.device.type,
                "cuda_graph": bool(used and reqs and reqs[-1]["verify_path"] == "fast"),
                "gpu": torch.cuda.get_device_name(0) if self.device.type == "cuda" else None}
