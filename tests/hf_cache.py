"""A Hugging Face cache in a tmp folder, holding config.json (and generation_config.json) of real models.

The dimensions are those of the models' published config.json files; weights are never needed to plan.
"""

from __future__ import annotations

import json
from pathlib import Path

# name: (hidden, layers, heads, kv heads, head_dim or None, intermediate, vocab, tied, context, model_type)
CONFIGS = {
    "Qwen/Qwen2.5-0.5B-Instruct": (896, 24, 14, 2, None, 4864, 151936, True, 32768, "qwen2"),
    "meta-llama/Llama-3.2-1B-Instruct": (2048, 16, 32, 8, 64, 8192, 128256, True, 131072, "llama"),
    "Qwen/Qwen2.5-1.5B-Instruct": (1536, 28, 12, 2, None, 8960, 151936, True, 32768, "qwen2"),
    "Qwen/Qwen3-1.7B": (2048, 28, 16, 8, 128, 6144, 151936, True, 40960, "qwen3"),
    "Qwen/Qwen2.5-3B-Instruct": (2048, 36, 16, 2, None, 11008, 151936, True, 32768, "qwen2"),
    "meta-llama/Llama-3.2-3B-Instruct": (3072, 28, 24, 8, 128, 8192, 128256, True, 131072, "llama"),
    "Qwen/Qwen2.5-7B-Instruct": (3584, 28, 28, 4, None, 18944, 152064, False, 32768, "qwen2"),
    "Qwen/Qwen3-8B": (4096, 36, 32, 8, 128, 12288, 151936, False, 40960, "qwen3"),
    "meta-llama/Llama-3.1-8B-Instruct": (4096, 32, 32, 8, None, 14336, 128256, False, 131072, "llama"),
    "Qwen/Qwen2.5-14B-Instruct": (5120, 48, 40, 8, None, 13824, 152064, False, 32768, "qwen2"),
    "Qwen/Qwen2.5-32B-Instruct": (5120, 64, 40, 8, None, 27648, 152064, False, 32768, "qwen2"),
    "meta-llama/Llama-3.1-70B-Instruct": (8192, 80, 64, 8, None, 28672, 128256, False, 131072, "llama"),
}
# Parameter counts (billions) as the model cards state them, rounded; the estimate must be within 2%.
PARAMS_B = {
    "Qwen/Qwen2.5-0.5B-Instruct": 0.49, "meta-llama/Llama-3.2-1B-Instruct": 1.24,
    "Qwen/Qwen2.5-1.5B-Instruct": 1.54, "Qwen/Qwen3-1.7B": 1.7, "Qwen/Qwen2.5-3B-Instruct": 3.09,
    "meta-llama/Llama-3.2-3B-Instruct": 3.21, "Qwen/Qwen2.5-7B-Instruct": 7.61, "Qwen/Qwen3-8B": 8.2,
    "meta-llama/Llama-3.1-8B-Instruct": 8.03, "Qwen/Qwen2.5-14B-Instruct": 14.7,
    "Qwen/Qwen2.5-32B-Instruct": 32.5, "meta-llama/Llama-3.1-70B-Instruct": 70.6,
}
GENERATION = {"Qwen/Qwen3-1.7B": {"temperature": 0.6, "top_p": 0.95, "top_k": 20},
              "Qwen/Qwen3-8B": {"temperature": 0.6, "top_p": 0.95, "top_k": 20},
              "meta-llama/Llama-3.1-8B-Instruct": {"temperature": 0.6, "top_p": 0.9}}


def config_json(model: str) -> dict:
    h, layers, heads, kv, hd, inter, vocab, tied, ctx, mtype = CONFIGS[model]
    cfg = {"hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
           "intermediate_size": inter, "vocab_size": vocab, "tie_word_embeddings": tied,
           "max_position_embeddings": ctx, "model_type": mtype, "torch_dtype": "bfloat16"}
    if hd:
        cfg["head_dim"] = hd
    return cfg


def write_cache(hf_home: Path, models=tuple(CONFIGS), revision: str = "0123abcd") -> Path:
    """HF_HOME/hub/models--org--name/{refs/main, snapshots/<rev>/config.json}, as huggingface_hub lays it out."""
    for model in models:
        repo = hf_home / "hub" / ("models--" + model.replace("/", "--"))
        snap = repo / "snapshots" / revision
        snap.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
        (snap / "config.json").write_text(json.dumps(config_json(model)))
        if model in GENERATION:
            (snap / "generation_config.json").write_text(json.dumps(GENERATION[model]))
    return hf_home
