"""Seconds to profile models analytically (goal: a 175B-parameter model in under 30 s here).

    PYTHONPATH=. python benchmarks/analytic_speed.py [--hardware a100-80gb]

Prints one row per model: rows of the default profile space (tp up to 8, micro-batch 1, 2, 4),
wall seconds and seconds per row. The models are GPT-3 shapes (Brown et al. 2020, Table 2.1) and
a LLaMA-2-70B shape (Touvron et al. 2023).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from tinker_opt.hardware import load_hardware
from tinker_opt.profile.analytic import analytic_profile
from tinker_opt.profile.space import SpaceLimits
from tinker_opt.specs import ModelSpec

MODELS = {
    "gpt3-1.3b": ModelSpec(
        num_layers=24,
        hidden_size=2048,
        ffn_hidden_size=8192,
        num_attention_heads=16,
        num_query_groups=16,
        kv_channels=128,
        seq_length=2048,
        vocab_size=51200,
    ),
    "gpt3-175b": ModelSpec(
        num_layers=96,
        hidden_size=12288,
        ffn_hidden_size=49152,
        num_attention_heads=96,
        num_query_groups=96,
        kv_channels=128,
        seq_length=2048,
        vocab_size=51200,
    ),
    "llama2-70b": ModelSpec(
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_attention_heads=64,
        num_query_groups=8,
        kv_channels=128,
        seq_length=4096,
        vocab_size=32000,
        normalization="RMSNorm",
        swiglu=True,
        position_embedding_type="rope",
        use_flash_attn=True,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        add_bias_linear=False,
        untie_embeddings_and_output_weights=True,
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hardware", default="a100-80gb")
    args = parser.parse_args()
    hardware = load_hardware(args.hardware)
    print(f"{'model':12} {'rows':>5} {'seconds':>8} {'s/row':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in MODELS.items():
            started = time.perf_counter()
            folder = analytic_profile(
                model, hardware, Path(tmp) / name, limits=SpaceLimits(max_npu=8, max_mbs=4)
            )
            seconds = time.perf_counter() - started
            rows = len(pd.read_csv(folder / "blocks.csv"))
            print(f"{name:12} {rows:5d} {seconds:8.1f} {seconds / rows:6.3f}")


if __name__ == "__main__":
    main()
