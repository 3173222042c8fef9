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


def dflash_taps(target_layers: int, taps: int | None = None) -> list[int]:
    """Target layer ids whose outputs a DFlash draft reads, spread over [0, target_layers - 2].
    SGLang's DeepSeek-V3 captures the INPUT of layer id + 1 (deepseek_v2.py
    set_dflash_layers_to_capture), so the last layer's output is never captured: a DFLASH
    target needs at least 2 layers. taps=None gives min(target_layers - 1, 5) (DFlash's
    published drafts read 5 target layers)."""
    if not isinstance(target_layers, int) or target_layers < 2:
        raise ValueError(f"target_layers: DFLASH needs a target of at least 2 layers (SGLang captures the input of "
                         f"layer id + 1, never the last layer's output), got {target_layers!r}")
    n = min(target_layers - 1, 5) if taps is None else taps
    if not isinstance(n, int) or not 1 <= n <= target_layers - 1:
        raise ValueError(f"taps: expected 1..{target_layers - 1} for a {target_layers}-layer target, got {taps!r}")
    top = target_layers - 2
    return sorted({round(i * top / (n - 1)) for i in range(n)}) if n > 1 else [top // 2]


def tiny_dflash_draft(target: dict, *, block_size: int = 16, draft_layers: int = 1, taps: int | None = None) -> dict:
    """config.json fields of a DFlash block-diffusion draft (SGLang 0.5.23's DFlashDraftModel,
    models/dflash.py) for the target whose config.json fields are `target`: Qwen3-style GQA
    layers (8 query heads, 2 KV heads, head_dim 128) of the target's hidden size, with the
    target's vocabulary, positions and rope theta (the draft borrows the target's embedding
    and LM head, and attends over the whole context with its own KV cache). dflash_config
    holds the block size, the target layers tapped (dflash_taps) and mask_token_id (the last
    id of the vocabulary: with --skip-tokenizer-init SGLang cannot look the mask token up).
    For real SGLang servers with --load-format dummy (the weights are random)."""
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size: expected a positive int, got {block_size!r}")
    if not isinstance(draft_layers, int) or draft_layers < 1:
        raise ValueError(f"draft_layers: expected a positive int, got {draft_layers!r}")
    layers = target["num_hidden_layers"]
    dflash = dict(block_size=block_size, target_layer_ids=dflash_taps(layers, taps), num_target_layers=layers,
                  mask_token_id=target["vocab_size"] - 1)
    return dict(architectures=["DFlashDraftModel"], hidden_size=target["hidden_size"], intermediate_size=2048,
                num_hidden_layers=draft_layers, num_attention_heads=8, num_key_value_heads=2, head_dim=128,
                vocab_size=target["vocab_size"], max_position_embeddings=target["max_position_embeddings"],
                rope_theta=target["rope_theta"], rms_norm_eps=1e-6, tie_word_embeddings=False,
                torch_dtype=target.get("torch_dtype", "bfloat16"), block_size=block_size, dflash_config=dflash)


def write_tiny_dflash_draft(path, target: dict, *, block_size: int = 16, draft_layers: int = 1,
                            taps: int | None = None) -> Path:
    """A `tiny_dflash_draft(target, ...)` folder (config.json only, a transformers Qwen3Config:
    the model_type DFlash's published drafts carry)."""
    import transformers

    path = Path(path)
    transformers.Qwen3Config(**tiny_dflash_draft(target, block_size=block_size, draft_layers=draft_layers,
                                                 taps=taps)).save_pretrained(path)
    return path
