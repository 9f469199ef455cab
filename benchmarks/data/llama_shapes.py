"""LLaMA model shapes (Meta's published configs) shared by the run-file generators of this folder
(make_heldout_runs.py, make_blackwell_runs.py)."""

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
