"""sglang_mini: a tiny LLM decode engine laid out like SGLang, for bisect-lab's demo.

Everything is deterministic (weights come from a seeded generator) and small enough to
benchmark on two CPU cores in about a second; with ``--device cuda`` the same model runs
in torch with CUDA graphs.
"""
__version__ = "0.1.0"
