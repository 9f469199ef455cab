"""Small ModelSpecs shared by the profiler tests."""

from __future__ import annotations

from tinker_opt.specs import ModelSpec


def gpt_model(*, seq: int = 128, hidden: int = 128, heads: int = 8, layers: int = 2, vocab: int = 1000) -> ModelSpec:
    """GPT style: LayerNorm, GeLU MLP (f = 4h), learned positions, materialised attention, dropout 0.1."""
    return ModelSpec(num_layers=layers, hidden_size=hidden, ffn_hidden_size=4 * hidden, num_attention_heads=heads,
                     num_query_groups=heads, kv_channels=hidden // heads, seq_length=seq, vocab_size=vocab)


def llama_model(*, seq: int = 128, hidden: int = 128, heads: int = 8, groups: int = 2, ffn: int = 344,
                layers: int = 2, vocab: int = 1000) -> ModelSpec:
    """LLaMA style: RMSNorm, rotary, GQA, SwiGLU, flash attention, no dropout, no biases."""
    return ModelSpec(num_layers=layers, hidden_size=hidden, ffn_hidden_size=ffn, num_attention_heads=heads,
                     num_query_groups=groups, kv_channels=hidden // heads, seq_length=seq, vocab_size=vocab,
                     normalization="RMSNorm", swiglu=True, position_embedding_type="rope", use_flash_attn=True,
                     attention_dropout=0.0, hidden_dropout=0.0, add_bias_linear=False,
                     untie_embeddings_and_output_weights=True)


def moe_model(*, seq: int = 64, hidden: int = 64, experts: int = 8) -> ModelSpec:
    """DeepSeek-like MoE: one dense layer first, routed experts top-2, one shared expert."""
    return ModelSpec(num_layers=3, hidden_size=hidden, ffn_hidden_size=4 * hidden, num_attention_heads=4,
                     num_query_groups=2, kv_channels=hidden // 4, seq_length=seq, vocab_size=500,
                     normalization="RMSNorm", swiglu=True, position_embedding_type="rope", use_flash_attn=True,
                     attention_dropout=0.0, hidden_dropout=0.0, add_bias_linear=False, num_experts=experts,
                     moe_router_topk=2, moe_ffn_hidden_size=32, moe_shared_expert_intermediate_size=64,
                     first_k_dense_replace=1)
