"""DeepSeek-V2-style language model: MLA attention + expert-parallel MoE, numpy.

Weights come from a seeded generator and are shaped so that the model behaves like a
language model a draft can predict: the embedding and lm_head form a fixed "bigram"
map, and each layer adds a context-dependent residual on top.  The draft (EAGLE-3) sees
the same embedding/head plus its own small residual, so it agrees with the target most
of the time but not always, which gives a realistic accept length (~2-3 of 4).

Tensor parallelism is expert parallelism here: attention is replicated on every rank,
each rank owns ``num_experts / tp`` experts, and the MoE output is all-reduced.
"""
from __future__ import annotations

import numpy as np

from ..layers.attention.mla_backend import MLAAttentionBackend
from ..layers.moe.topk import select_experts

RESIDUAL_SCALE = 1.1    # how far each layer pushes the hidden state off the bigram map (accept ~2.7)


def rms_norm(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(1e-6))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1.0) + np.exp(-x))


def init_weights(args) -> dict:
    """All weights of target and draft, identical on every rank (same seed)."""
    rng = np.random.default_rng(args.seed)
    H, V, L, E, F = args.hidden_size, args.vocab_size, args.num_layers, args.num_experts, args.moe_intermediate_size
    nh, dh, R = args.num_heads, args.head_dim, args.kv_lora_rank

    def mat(*shape, fan_in, scale=1.0):
        return (rng.standard_normal(shape, np.float32) * np.float32(scale / np.sqrt(fan_in))).astype(np.float32)

    emb = rng.standard_normal((V, H), np.float32)
    emb *= np.sqrt(H) / np.linalg.norm(emb, axis=1, keepdims=True)          # rms 1 per row
    perm = rng.permutation(V)                                                # bigram: t -> perm[t]
    inv = np.argsort(perm)
    w = {"embed": emb.astype(np.float32), "lm_head": (emb[inv] / np.sqrt(H)).astype(np.float32), "layers": []}
    s = RESIDUAL_SCALE
    for _ in range(L):
        w["layers"].append({
            "q": mat(H, nh * dh, fan_in=H),
            "kv_a": mat(H, R, fan_in=H),
            "k_b": mat(nh, dh, R, fan_in=dh),          # absorbed into the query
            "v_b": mat(nh, R, dh, fan_in=R),
            "o": mat(nh * dh, H, fan_in=nh * dh, scale=s),
            "gate": mat(H, E, fan_in=H, scale=4.0),
            "w1": mat(E, H, F, fan_in=H),
            "w2": mat(E, F, H, fan_in=F, scale=s * 2.0),
        })
    w["draft"] = {
        "fc": mat(3 * H, H, fan_in=3 * H, scale=0.3),
        "w1": mat(H, 2 * H, fan_in=H),
        "w2": mat(2 * H, H, fan_in=2 * H, scale=0.9),
    }
    return w


class DeepseekV2ForCausalLM:
    def __init__(self, args, weights: dict, comm):
        self.args, self.comm = args, comm
        self.embed, self.lm_head = weights["embed"], weights["lm_head"]
        self.layers = weights["layers"]
        per_rank = args.num_experts // comm.world_size
        self.expert_lo = comm.rank * per_rank
        self.expert_hi = self.expert_lo + per_rank
        lo, hi = self.expert_lo, self.expert_hi
        # this rank's experts side by side: W1 [H, El*F], W2 [El*F, H]
        self.w1_local = [np.ascontiguousarray(np.concatenate(list(lw["w1"][lo:hi]), axis=1)) for lw in self.layers]
        self.w2_local = [np.ascontiguousarray(lw["w2"][lo:hi].reshape(-1, args.hidden_size)) for lw in self.layers]
        self.attn_backend = MLAAttentionBackend(args.num_layers, args.max_seq_len, args.kv_lora_rank, args.head_dim)
        self.last_path = None

    def reset(self) -> None:
        self.attn_backend.reset()

    # -- layers ------------------------------------------------------------------------
    def _attention(self, i: int, x: np.ndarray, start: int, fast: bool) -> np.ndarray:
        lw, a = self.layers[i], self.args
        t = x.shape[0]
        q = (x @ lw["q"]).reshape(t, a.num_heads, a.head_dim)
        q_lat = np.einsum("thd,hdr->thr", q, lw["k_b"])
        c_new = x @ lw["kv_a"]
        be = self.attn_backend
        o_lat = be.forward_batched(i, q_lat, c_new, start) if fast else be.forward_extend(i, q_lat, c_new, start)
        o = np.einsum("thr,hrd->thd", o_lat, lw["v_b"]).reshape(t, -1)
        return o @ lw["o"]

    def _moe(self, i: int, x: np.ndarray, fast: bool) -> np.ndarray:
        """This rank's experts' share of the MoE output (all-reduced by the caller)."""
        lw = self.layers[i]
        weights, ids = select_experts(x @ lw["gate"], self.args.top_k)
        lo, hi = self.expert_lo, self.expert_hi
        if fast:
            # Static shapes, as a captured graph needs: every local expert runs densely on
            # every token (two GEMMs over the concatenated expert weights), and a dense
            # routing matrix zeroes the pairs the router did not pick.
            route = np.zeros((x.shape[0], self.args.num_experts), np.float32)
            np.put_along_axis(route, ids, weights, axis=1)
            h1 = silu(x @ self.w1_local[i]).reshape(x.shape[0], hi - lo, -1)      # [T, El, F]
            h1 *= route[:, lo:hi, None]
            out = h1.reshape(x.shape[0], -1) @ self.w2_local[i]                   # [T, H]
        else:
            # extend: token by token, expert by expert
            out = np.zeros_like(x)
            for t in range(x.shape[0]):
                for slot in range(ids.shape[1]):
                    e = int(ids[t, slot])
                    if lo <= e < hi:
                        out[t] += (silu(x[t] @ lw["w1"][e]) @ lw["w2"][e]) * weights[t, slot]
        return out

    # -- forward -----------------------------------------------------------------------
    def forward(self, tokens: np.ndarray, start: int, mode: str, use_graph: bool = True):
        """Run T tokens at positions start..start+T-1; returns final hidden [T, H] (normed).

        ``mode`` is "extend" (prefill), "decode" or "target_verify".  The batched
        ("graph") path runs only where the attention backend says the mode is capturable.
        """
        fast = use_graph and self.attn_backend.can_run_graph(mode)
        self.last_path = "fast" if fast else "extend"
        h = self.embed[tokens]
        for i in range(len(self.layers)):
            h = h + self._attention(i, rms_norm(h), start, fast)
            h = h + self.comm.all_reduce(self._moe(i, rms_norm(h), fast))
        return rms_norm(h)

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        return hidden @ self.lm_head.T
