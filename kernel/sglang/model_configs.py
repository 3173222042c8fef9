"""Kimi-K2-shaped model folders holding only config.json (no weights), for SGLang's own
config and ServerArgs code: a target with or without a NextN (MTP) layer, and an EAGLE3
draft. Used by the plugin's CPU tests, the launch-command test and the GPU check."""
from __future__ import annotations

from pathlib import Path

# Kimi-K2-Instruct-0905 (DeepSeek-V3 architecture): 61 layers, 64 heads, MLA latent 512 +
# rope 64, 256k positions. The public K2 checkpoints ship no NextN layer (0); DeepSeek-V3
# ships one, which SGLang's EAGLE without a draft path loads as the draft.
KIMI_K2 = dict(
    architectures=["DeepseekV3ForCausalLM"], hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
    num_hidden_layers=61, num_attention_heads=64, num_key_value_heads=64, kv_lora_rank=512, q_lora_rank=1536,
    qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, n_routed_experts=384, n_shared_experts=1,
    num_experts_per_tok=8, first_k_dense_replace=1, n_group=1, topk_group=1, routed_scaling_factor=2.827,
    # transformers 5's DeepseekV3Config drops these unless given, and SGLang's MoE gate (the NextN
    # layer's too) reads topk_method: Kimi-K2's config.json values.
    topk_method="noaux_tc", scoring_func="sigmoid",
    vocab_size=163840, max_position_embeddings=262144, rope_theta=50000.0,
    rope_scaling=dict(type="yarn", factor=64.0, original_max_position_embeddings=4096, beta_fast=1.0, beta_slow=1.0,
                      mscale=1.0, mscale_all_dim=1.0),
    torch_dtype="bfloat16",
)


def write_kimi_k2(path, *, nextn_layers: int = 0, **overrides) -> Path:
    """A Kimi-K2-shaped target checkpoint folder; nextn_layers=1 gives it an MTP layer."""
    import transformers

    if nextn_layers not in (0, 1):
        raise ValueError(f"nextn_layers: SGLang supports 0 or 1 NextN layers, got {nextn_layers}")
    path = Path(path)
    transformers.DeepseekV3Config(**dict(KIMI_K2, num_nextn_predict_layers=nextn_layers, **overrides)) \
        .save_pretrained(path)
    return path


def write_eagle3_draft(path, **overrides) -> Path:
    """A one-layer EAGLE3 draft for a Kimi-K2 target (SGLang's LlamaForCausalLMEagle3)."""
    import transformers

    path = Path(path)
    fields = dict(architectures=["LlamaForCausalLMEagle3"], hidden_size=7168, intermediate_size=18432,
                  num_hidden_layers=1, num_attention_heads=64, num_key_value_heads=8, vocab_size=163840,
                  draft_vocab_size=32000, max_position_embeddings=262144, rope_theta=50000.0, torch_dtype="bfloat16")
    fields.update(overrides)
    transformers.LlamaConfig(**fields).save_pretrained(path)
    return path


def tiny_mla(layers: int) -> dict:
    """config.json fields of a small DeepSeek-V3-architecture model with Kimi-K2's attention
    as one TP-8 rank sees it: 8 heads, latent 512 + rope 64, nope 128, v 128, YaRN rope over
    262,144 positions. Dense MLP in every target layer (first_k_dense_replace > layers) keeps
    the weights small; SGLang still builds the NextN layer as MoE, so it gets 8 small experts,
    top 2. For real SGLang servers with --load-format dummy (the weights are random)."""
    if not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers: expected a positive int, got {layers!r}")
    return dict(KIMI_K2, hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
                num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=8, q_lora_rank=512,
                n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=layers + 1,
                vocab_size=32768)


def write_tiny_mla(path, *, layers: int, nextn_layers: int = 1, **overrides) -> Path:
    """A `tiny_mla(layers)` checkpoint folder (config.json only); nextn_layers=1 gives it the
    NextN layer that SGLang's EAGLE loads as the draft when no draft path is given."""
    return write_kimi_k2(path, nextn_layers=nextn_layers, **dict(tiny_mla(layers), **overrides))
