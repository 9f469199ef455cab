"""Profiler speed on this machine: seconds per measured row and the total of the example's space.

    PYTHONPATH=. python benchmarks/profile_speed.py [--device cpu] [--skip-7b] [--max-mbs 4]

Prints (1) the whole profile of a small LLaMA-style example (the shape of the shipped example:
4 layers, hidden 256, seq 512, GQA 8/4 heads, SwiGLU, vocabulary 32000, max_npu 8) with seconds
per row for each block, the communication profile's seconds and the total; (2) one
LLaMA-2-7B-shaped decoder-layer shard at tp 8 (hidden 4096, 32 heads, ffn 11008, seq 4096, mbs 1).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from tinker_opt.config import ProfileSettings
from tinker_opt.profile.device import detect_device
from tinker_opt.profile.measure import measure_block
from tinker_opt.profile.runner import MeasureSettings, run_profile
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.subgraphs import build_block
from tinker_opt.specs import ModelSpec

LLAMA = dict(
    normalization="RMSNorm",
    swiglu=True,
    position_embedding_type="rope",
    use_flash_attn=True,
    attention_dropout=0.0,
    hidden_dropout=0.0,
    add_bias_linear=False,
    untie_embeddings_and_output_weights=True,
)


def example_model(hidden: int = 256, seq: int = 512) -> ModelSpec:
    return ModelSpec(
        num_layers=4,
        hidden_size=hidden,
        ffn_hidden_size=hidden * 43 // 16,
        num_attention_heads=8,
        num_query_groups=4,
        kv_channels=hidden // 8,
        seq_length=seq,
        vocab_size=32000,
        **LLAMA,
    )


def llama2_7b() -> ModelSpec:
    return ModelSpec(
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=11008,
        num_attention_heads=32,
        num_query_groups=32,
        kv_channels=128,
        seq_length=4096,
        vocab_size=32000,
        **LLAMA,
    )


def profile_example(model: ModelSpec, settings: MeasureSettings) -> None:
    """Run the whole profile, timing each row through the progress callback."""
    stamps: list[tuple[str, float]] = []
    comm_s: list[float] = []

    def progress(done: int, total: int, label: str) -> None:
        stamps.append((label.split()[0], time.perf_counter()))

    def log(line: str) -> None:
        if line.startswith("comm.csv:"):
            comm_s.append(float(line.rsplit(",", 1)[1].split()[0]))

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        run_profile(model, settings, Path(tmp) / "profile", progress=progress, log=log)
        total = time.perf_counter() - start
    per_block: dict[str, list[float]] = defaultdict(list)
    previous = start
    for block, stamp in stamps:
        per_block[block].append(stamp - previous)
        previous = stamp
    print(
        f"example: hidden {model.hidden_size}, seq {model.seq_length}, vocab {model.vocab_size}, "
        f"max_mbs {settings.max_mbs}, repeats {settings.repeats}"
    )
    print(f"{'block':<12}{'rows':>6}{'s/row mean':>12}{'s/row max':>11}{'s total':>9}")
    for block, seconds in per_block.items():
        print(
            f"{block:<12}{len(seconds):>6}{statistics.mean(seconds):>12.3f}{max(seconds):>11.3f}{sum(seconds):>9.1f}"
        )
    rows = sum(len(s) for s in per_block.values())
    print(f"{'all rows':<12}{rows:>6}{sum(map(sum, per_block.values())) / rows:>12.3f}")
    print(
        f"communication profile: {comm_s[0] if comm_s else 0.0:.1f} s; total run_profile: {total:.1f} s\n"
    )


def profile_7b_layer(device_kind: str, repeats: int) -> None:
    device = detect_device(device_kind)
    start = time.perf_counter()
    block = build_block(llama2_7b(), "layer", Shape(tp=8, mbs=1), device=device.torch_device)
    built = time.perf_counter()
    m = measure_block(block, device, warmup=0, repeats=repeats)
    done = time.perf_counter()
    print("LLaMA-2-7B layer shard, tp 8, seq 4096, mbs 1")
    print(
        f"  build {built - start:.2f} s, measure {done - built:.1f} s (one row, {repeats} timed passes)"
    )
    print(
        f"  fwd {m.fwd_us / 1e3:.1f} ms, bwd {m.bwd_us / 1e3:.1f} ms, "
        f"activations {m.activation_bytes / 2**20:.1f} MiB, "
        f"weights {m.weight_bytes / 2**20:.1f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-mbs", type=int, default=ProfileSettings().max_mbs)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--skip-7b", action="store_true")
    args = parser.parse_args()
    settings = MeasureSettings.from_settings(
        ProfileSettings(device=args.device, max_mbs=args.max_mbs)
    )
    profile_example(example_model(args.hidden, args.seq), settings)
    if not args.skip_7b:
        profile_7b_layer(args.device, settings.repeats)


if __name__ == "__main__":
    main()
