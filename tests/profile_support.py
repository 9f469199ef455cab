"""Small ModelSpecs shared by the profiler tests."""

from __future__ import annotations

from dataclasses import replace

from tinker_opt.specs import ModelSpec


def gpt_model(
    *, seq: int = 128, hidden: int = 128, heads: int = 8, layers: int = 2, vocab: int = 1000
) -> ModelSpec:
    """GPT style: LayerNorm, GeLU MLP (f = 4h), learned positions, materialised attention, dropout 0.1."""
    return ModelSpec(
        num_layers=layers,
        hidden_size=hidden,
        ffn_hidden_size=4 * hidden,
        num_attention_heads=heads,
        num_query_groups=heads,
        kv_channels=hidden // heads,
        seq_length=seq,
        vocab_size=vocab,
    )


def llama_model(
    *,
    seq: int = 128,
    hidden: int = 128,
    heads: int = 8,
    groups: int = 2,
    ffn: int = 344,
    layers: int = 2,
    vocab: int = 1000,
) -> ModelSpec:
    """LLaMA style: RMSNorm, rotary, GQA, SwiGLU, flash attention, no dropout, no biases."""
    return ModelSpec(
        num_layers=layers,
        hidden_size=hidden,
        ffn_hidden_size=ffn,
        num_attention_heads=heads,
        num_query_groups=groups,
        kv_channels=hidden // heads,
        seq_length=seq,
        vocab_size=vocab,
        normalization="RMSNorm",
        swiglu=True,
        position_embedding_type="rope",
        use_flash_attn=True,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        add_bias_linear=False,
        untie_embeddings_and_output_weights=True,
    )


def moe_model(*, seq: int = 64, hidden: int = 64, experts: int = 8) -> ModelSpec:
    """DeepSeek-like MoE: one dense layer first, routed experts top-2, one shared expert."""
    return ModelSpec(
        num_layers=3,
        hidden_size=hidden,
        ffn_hidden_size=4 * hidden,
        num_attention_heads=4,
        num_query_groups=2,
        kv_channels=hidden // 4,
        seq_length=seq,
        vocab_size=500,
        normalization="RMSNorm",
        swiglu=True,
        position_embedding_type="rope",
        use_flash_attn=True,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        add_bias_linear=False,
        num_experts=experts,
        moe_router_topk=2,
        moe_ffn_hidden_size=32,
        moe_shared_expert_intermediate_size=64,
        first_k_dense_replace=1,
    )


def mla_model(
    *,
    seq: int = 32,
    hidden: int = 64,
    heads: int = 4,
    q_lora_rank: int | None = 48,
    kv_lora_rank: int = 32,
    flash: bool = True,
    moe: bool = False,
) -> ModelSpec:
    """DeepSeek-V3 style multi-head latent attention (q/kv low-rank, 8-wide rotary part, v dim 12)."""
    base = (
        moe_model(seq=seq, hidden=hidden)
        if moe
        else llama_model(
            seq=seq, hidden=hidden, heads=heads, groups=heads, ffn=2 * hidden, vocab=256
        )
    )
    return replace(
        base,
        multi_latent_attention=True,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=kv_lora_rank,
        qk_head_dim=16,
        qk_pos_emb_head_dim=8,
        v_head_dim=12,
        use_flash_attn=flash,
    )
