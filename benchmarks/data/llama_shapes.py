"""LLaMA-family model shapes (Meta's and Mistral's published configs) shared by the run-file
generators of this folder (make_heldout_runs.py, make_blackwell_runs.py, make_memory_runs.py)."""

LLAMA = {
    "llama2_7b": dict(
        name="LLaMA-2-7B",
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=32,
        ffn=11008,
        vocab=32000,
        seq=4096,
    ),
    "llama2_13b": dict(
        name="LLaMA-2-13B",
        layers=40,
        hidden=5120,
        heads=40,
        kv_heads=40,
        ffn=13824,
        vocab=32000,
        seq=4096,
    ),
    "llama2_70b": dict(
        name="LLaMA-2-70B",
        layers=80,
        hidden=8192,
        heads=64,
        kv_heads=8,
        ffn=28672,
        vocab=32000,
        seq=4096,
    ),
    "llama3_8b": dict(
        name="LLaMA-3-8B",
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        ffn=14336,
        vocab=128256,
        seq=8192,
    ),
    "llama3_70b": dict(
        name="LLaMA-3-70B",
        layers=80,
        hidden=8192,
        heads=64,
        kv_heads=8,
        ffn=28672,
        vocab=128256,
        seq=8192,
    ),
    "llama31_405b": dict(
        name="LLaMA-3.1-405B",
        layers=126,
        hidden=16384,
        heads=128,
        kv_heads=8,
        ffn=53248,
        vocab=128256,
        seq=8192,
    ),
}


def llama(key: str) -> dict:
    """The runs file's `model` object of LLaMA shape `key` (head_dim = hidden / heads)."""
    shape = LLAMA[key]
    return dict(shape, arch="llama", head_dim=shape["hidden"] // shape["heads"])


def mixtral_8x22b(*, vocab: int, seq: int) -> dict:
    """Mixtral-8x22B (56 layers, h 6144, 48 heads, 8 query groups, 8 experts top-2, expert ffn
    16384) with the run's vocabulary (32000 or the v3 tokenizer's 32768) and sequence length."""
    return {
        "name": "Mixtral-8x22B",
        "arch": "mixtral",
        "layers": 56,
        "hidden": 6144,
        "heads": 48,
        "kv_heads": 8,
        "head_dim": 128,
        "ffn": None,
        "vocab": vocab,
        "seq": seq,
        "moe": {
            "num_experts": 8,
            "topk": 2,
            "moe_ffn": 16384,
            "first_k_dense": 0,
            "shared_experts": {"count": 0, "ffn_total": 0},
        },
    }
