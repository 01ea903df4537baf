"""A tiny random GLM-4-MoE checkpoint with ``mtp_layers`` MTP layers (default one), in
the layout vLLM's ``Glm4MoeMTP`` loads (MTP layer i is ``model.layers.<num_hidden_layers+i>.*`` with
``enorm``/``hnorm``/``eh_proj``/``shared_head``), built offline and deterministically."""

from __future__ import annotations

import json
from pathlib import Path

LAYERS = 2  # target layers; the MTP layer is index LAYERS


def build(out: Path, seed: int = 0, mtp_layers: int = 1) -> Path:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM

    torch.manual_seed(seed)
    cfg = Glm4MoeConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
        num_hidden_layers=LAYERS + mtp_layers, num_attention_heads=2, num_key_value_heads=1,
        head_dim=64, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
        first_k_dense_replace=1, max_position_embeddings=512, num_nextn_predict_layers=mtp_layers,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    model = Glm4MoeForCausalLM(cfg).to(torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    # The extra decoder layer becomes the MTP block; add the MTP-only tensors.
    files = sorted(out.glob("*.safetensors"))
    tensors = {}
    for f in files:
        tensors.update(load_file(str(f)))
        f.unlink()
    for idx in out.glob("*.index.json"):
        idx.unlink()
    g = torch.Generator().manual_seed(seed + 1)
    h = cfg.hidden_size
    for layer in range(LAYERS, LAYERS + mtp_layers):
        p = f"model.layers.{layer}."
        tensors[p + "enorm.weight"] = torch.ones(h)
        tensors[p + "hnorm.weight"] = torch.ones(h)
        tensors[p + "eh_proj.weight"] = torch.randn(h, 2 * h, generator=g) * 0.05
        tensors[p + "shared_head.norm.weight"] = torch.ones(h)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))
    conf = json.loads((out / "config.json").read_text())
    conf["num_hidden_layers"] = LAYERS
    conf["architectures"] = ["Glm4MoeForCausalLM"]
    (out / "config.json").write_text(json.dumps(conf, indent=2))
    return out
