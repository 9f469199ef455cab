"""Measured activation bytes of the reference sub-graphs against the published formulas.

    PYTHONPATH=. python benchmarks/activation_formulas.py [--seq 512 --hidden 512 --heads 8 --mbs 1]

GPT style (LayerNorm, GeLU, dropout, materialised scores) against Korthikanti et al. (2022),
Table 2, for tp 1 / 2 / 4 with and without sequence parallel and with selective recompute;
LLaMA style (RMSNorm, rotary, GQA, SwiGLU, flash) against s*b*h*(22 + 6g/a + 8f/h) + 4*a*s*b.
Counts run under FakeTensorMode: nothing is allocated, so large shapes are quick.
"""

from __future__ import annotations

import argparse

from torch._subclasses.fake_tensor import FakeTensorMode

from tinker_opt.profile.shape import Shape
from tinker_opt.profile.subgraphs import build_block, saved_activation_bytes
from tinker_opt.specs import ModelSpec


def korthikanti(s, b, h, a, tp, sp, selective) -> float:
    scores = 0.0 if selective else 5 * a * s / h
    return s * b * h * (34 + scores) / tp if sp else s * b * h * (10 + 24 / tp + scores / tp)


def gpt_rows(s, b, h, a):
    model = ModelSpec(
        num_layers=2,
        hidden_size=h,
        ffn_hidden_size=4 * h,
        num_attention_heads=a,
        num_query_groups=a,
        kv_channels=h // a,
        seq_length=s,
        vocab_size=32000,
    )
    for tp, sp in ((1, False), (2, False), (2, True), (4, False), (4, True)):
        for selective in (False, True):
            with FakeTensorMode():
                measured = saved_activation_bytes(
                    build_block(model, "layer", Shape(tp=tp, sp=sp, mbs=b)), selective=selective
                )
            yield (
                f"GPT tp{tp} sp{int(sp)}{' selective' if selective else ''}",
                measured,
                korthikanti(s, b, h, a, tp, sp, selective),
            )


def llama_rows(s, b, h, a):
    for g, f in ((a // 4, h * 43 // 16), (a, 4 * h)):
        model = ModelSpec(
            num_layers=2,
            hidden_size=h,
            ffn_hidden_size=f,
            num_attention_heads=a,
            num_query_groups=g,
            kv_channels=h // a,
            seq_length=s,
            vocab_size=32000,
            normalization="RMSNorm",
            swiglu=True,
            position_embedding_type="rope",
            use_flash_attn=True,
            attention_dropout=0.0,
            hidden_dropout=0.0,
            add_bias_linear=False,
        )
        with FakeTensorMode():
            measured = saved_activation_bytes(build_block(model, "layer", Shape(mbs=b)))
        yield f"LLaMA g{g} f{f}", measured, s * b * h * (22 + 6 * g / a + 8 * f / h) + 4 * a * s * b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--mbs", type=int, default=1)
    args = parser.parse_args()
    s, b, h, a = args.seq, args.mbs, args.hidden, args.heads
    print(f"s={s} b={b} h={h} a={a}, bf16; MiB = 2^20 bytes")
    print(f"| {'layer':<24} | {'measured MiB':>12} | {'formula MiB':>11} | {'ratio':>6} |")
    print(f"|{'-' * 26}|{'-' * 13}:|{'-' * 12}:|{'-' * 7}:|")
    for name, measured, formula in [*gpt_rows(s, b, h, a), *llama_rows(s, b, h, a)]:
        print(
            f"| {name:<24} | {measured / 2**20:>12.3f} | {formula / 2**20:>11.3f} | {measured / formula:>6.4f} |"
        )


if __name__ == "__main__":
    main()
