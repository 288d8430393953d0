"""Kimi-K2.5-style wrapper: a (vision-less here) multimodal shell around DeepSeek-V2.

As in SGLang, the outer model owns ``language_model`` and forwards calls to it.  Any
hook the speculative worker needs must be exposed on this outer class.
"""
from __future__ import annotations

from .deepseek_v2 import DeepseekV2ForCausalLM


class KimiK25ForConditionalGeneration:
    def __init__(self, args, weights: dict, comm):
        self.language_model = DeepseekV2ForCausalLM(args, weights, comm)

    def forward(self, tokens, start, mode, use_graph=True):
        return self.language_model.forward(tokens, start, mode, use_graph)

    def logits(self, hidden):
        return self.language_model.logits(hidden)

    def reset(self):
        self.language_model.reset()

    @property
    def last_path(self):
        return self.language_model.last_path

    @property
    def attn_backend(self):
        return self.language_model.attn_backend


EntryClass = KimiK25ForConditionalGeneration
