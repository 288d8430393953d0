"""EAGLE-3 speculative decoding: draft a chain of tokens, verify them in one target pass."""
from __future__ import annotations

from ..models.llama_eagle3 import LlamaForCausalLMEagle3


class SpeculativeDecodingNotSupported(RuntimeError):
    pass


def check_eagle3_support(model_cls) -> None:
    """Refuse EAGLE-3 on a model that does not expose the hooks the draft needs."""
    missing = [m for m in ("get_embed_and_head", "set_eagle3_layers_to_capture") if not hasattr(model_cls, m)]
    if missing:
        raise SpeculativeDecodingNotSupported(
            f"speculative_algorithm=EAGLE3 needs {model_cls.__name__}.{' and .'.join(missing)}(), "
            f"which this model does not provide: the EAGLE-3 hooks are not delegated to its "
            f"language model, so speculation cannot run")


class EAGLEWorker:
    def __init__(self, target, weights: dict, args):
        check_eagle3_support(type(target))
        n = args.num_layers
        # low, middle and high layers, as EAGLE-3 fuses them
        target.set_eagle3_layers_to_capture([0, n // 2, n - 1])
        embed, head = target.get_embed_and_head()
        self.target = target
        self.draft = LlamaForCausalLMEagle3(weights["draft"], embed, head)
        self.num_steps = args.speculative_num_steps

    def step(self, last: int, seq_len: int, aux, use_graph: bool = True):
        """One draft+verify step. Returns (new tokens, tokens now in the KV cache, aux)."""
        drafts = self.draft.propose(last, aux, self.num_steps)
        tokens = [last] + drafts
        hidden = self.target.forward(tokens, seq_len, "target_verify", use_graph)
        preds = self.target.logits(hidden).argmax(axis=-1)
        j = 0
        while j < len(drafts) and drafts[j] == int(preds[j]):
            j += 1
        new = drafts[:j] + [int(preds[j])]
        return new, seq_len + j + 1, self.target.aux_hidden_states[j]
