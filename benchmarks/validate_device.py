"""Predicted vs measured on one real device: train a whole model, profile it, simulate it, compare.

    PYTHONPATH=. python benchmarks/validate_device.py                # one NVIDIA GPU, ~1 B model
    PYTHONPATH=. python benchmarks/validate_device.py --dry-run      # the same flow on the CPU, tiny model

For a LLaMA-style model of about 1.1 B parameters (TinyLlama's shape: 22 layers, hidden 2048,
32 heads in 4 query groups, SwiGLU 5632, RMSNorm, rope, vocabulary 32000, bf16) at sequence 2048
and 4096, micro-batch 1 / 2 / 4 and recompute none / selective / full, on one device (tp = pp =
dp = 1, one micro-batch per step):

1. trains real steps and records the median step time after warm-up and the peak allocated memory
   (`torch.cuda.max_memory_allocated`; on the CPU the live-tensor peak of `LiveBytesTracker`).
   The model is megatron-core's `GPTModel` with the Transformer Engine spec when both import on
   CUDA (`--trainer auto`), otherwise the reference blocks of tinker_opt.profile stacked into a
   model with the same kernels (kernels.py) and the same mixed-precision Adam: bf16 weights, an
   fp32 gradient buffer per parameter, fp32 master weights and Adam moments (18 bytes / parameter,
   as Megatron's Float16Optimizer with gradient accumulation into `main_grad`).
2. writes a launch script for the model, runs `tinker-opt profile --device cuda` (cpu in the dry
   run) on it and `tinker-opt simulate --json` for each (mbs, recompute);
3. prints predicted vs measured time and memory per row and writes them as CSV
   (benchmarks/results/validate_device.csv unless --out).

Targets on a GPU: time within 5 % and memory within 3 % on every row. Offline (no package index):
see "Validating on a GPU" in the README for the wheels to bring.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from device_trainer import pick_trainer, train_row

from tinker_opt.profile.device import Device, detect_device
from tinker_opt.specs import ModelSpec

FLAGS = (
    "--use-flash-attn",
    "--use-fused-rmsnorm",
    "--use-fused-swiglu",
    "--use-fused-rotary-pos-emb",
)
RECOMPUTES = ("none", "selective", "full")


@dataclass(frozen=True)
class Plan:
    """What to run: model sizes, sequence lengths, micro-batch sizes, steps."""

    layers: int
    hidden: int
    heads: int
    groups: int
    ffn: int
    vocab: int
    seqs: tuple[int, ...]
    mbss: tuple[int, ...]
    recomputes: tuple[str, ...]
    warmup_steps: int
    steps: int


FULL = Plan(
    layers=22,
    hidden=2048,
    heads=32,
    groups=4,
    ffn=5632,
    vocab=32000,
    seqs=(2048, 4096),
    mbss=(1, 2, 4),
    recomputes=RECOMPUTES,
    warmup_steps=3,
    steps=8,
)
DRY = Plan(
    layers=2,
    hidden=64,
    heads=4,
    groups=2,
    ffn=176,
    vocab=512,
    seqs=(64, 128),
    mbss=(1, 2),
    recomputes=RECOMPUTES,
    warmup_steps=1,
    steps=3,
)


def model_spec(plan: Plan, seq: int) -> ModelSpec:
    return ModelSpec(
        num_layers=plan.layers,
        hidden_size=plan.hidden,
        ffn_hidden_size=plan.ffn,
        num_attention_heads=plan.heads,
        num_query_groups=plan.groups,
        kv_channels=plan.hidden // plan.heads,
        seq_length=seq,
        vocab_size=plan.vocab,
        make_vocab_size_divisible_by=1,
        normalization="RMSNorm",
        swiglu=True,
        position_embedding_type="rope",
        use_flash_attn=True,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        add_bias_linear=False,
        untie_embeddings_and_output_weights=True,
        # FLAGS' --use-fused-*: the launch runs fused RMSNorm, SwiGLU and rotary kernels.
        fused_kernels=("rmsnorm", "rope", "swiglu"),
    )


def launch_script(plan: Plan, seq: int, mbs: int) -> str:
    """A Megatron-style launch script of the model on one device (what `tinker-opt profile` reads)."""
    return f"""#!/bin/bash
# validate_device.py: LLaMA-style model, one device
NPUS_PER_NODE=1
NNODES=1
DISTRIBUTED_ARGS="--nproc_per_node $NPUS_PER_NODE --nnodes $NNODES --node_rank 0 \\
    --master_addr localhost --master_port 6000"
GPT_ARGS="
    --use-mcore-models --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1
    --num-layers {plan.layers} --hidden-size {plan.hidden} --ffn-hidden-size {plan.ffn}
    --num-attention-heads {plan.heads} --group-query-attention --num-query-groups {plan.groups}
    --seq-length {seq} --max-position-embeddings {seq} --micro-batch-size {mbs} --global-batch-size {mbs}
    --vocab-size {plan.vocab} --make-vocab-size-divisible-by 1 --untie-embeddings-and-output-weights
    --disable-bias-linear --position-embedding-type rope --normalization RMSNorm --swiglu
    {" ".join(FLAGS)} --attention-dropout 0.0 --hidden-dropout 0.0 --bf16
    --lr 1e-5 --train-iters 100 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95
"
torchrun $DISTRIBUTED_ARGS pretrain_gpt.py $GPT_ARGS --distributed-backend nccl
"""


# --- tinker-opt profile + simulate -------------------------------------------------------------


def tinker_opt(*args: str) -> str:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    )
    done = subprocess.run(
        [sys.executable, "-m", "tinker_opt.cli", *args], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"tinker-opt {args[0]} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def predict(
    script: Path, profile_dir: Path, device_kind: str, plan: Plan, mbs: int, recompute: str
) -> tuple[float, float]:
    """(iteration ms, peak MiB) that `tinker-opt simulate` predicts for tp = pp = dp = 1."""
    out = tinker_opt(
        "simulate",
        "--profiled-data-path",
        str(profile_dir),
        "--tp",
        "1",
        "--pp",
        "1",
        "--mbs",
        str(mbs),
        "--global-batch-size",
        str(mbs),
        "--recompute",
        recompute,
        "--num-nodes",
        "1",
        "--num-npus-per-node",
        "1",
        "--memory-limit",
        "1000000",
        "--json",
    )
    evaluation = json.loads(out)
    return float(evaluation["iteration_time_ms"]), float(evaluation["peak_memory_mb"])


def profile(script: Path, out: Path, device_kind: str, plan: Plan) -> Path:
    tinker_opt(
        "profile",
        str(script),
        "--device",
        device_kind,
        "--prof-path",
        str(out),
        "--max-npu",
        "1",
        "--max-mbs",
        str(max(plan.mbss)),
        "--repeats",
        "5",
        "--warmup",
        "2",
        "--devices",
        "1",
        "-q",
    )
    return out


def _pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured if measured else float("nan")


def run(plan: Plan, device: Device, trainer: str, work: Path) -> list[dict]:
    rows = []
    for seq in plan.seqs:
        model = model_spec(plan, seq)
        script = work / f"llama_1b_seq{seq}.sh"
        script.write_text(launch_script(plan, seq, plan.mbss[0]), encoding="utf-8")
        started = time.perf_counter()
        profile_dir = profile(script, work / f"profile-seq{seq}", device.kind, plan)
        print(f"seq {seq}: profiled in {time.perf_counter() - started:.0f} s", flush=True)
        for mbs in plan.mbss:
            for recompute in plan.recomputes:
                steps = (plan.warmup_steps, plan.steps)
                step_ms, peak_mb = train_row(model, mbs, recompute, device, steps, trainer, FLAGS)
                pred_ms, pred_mb = predict(script, profile_dir, device.kind, plan, mbs, recompute)
                rows.append(
                    {
                        "seq": seq,
                        "mbs": mbs,
                        "recompute": recompute,
                        "trainer": trainer,
                        "measured_step_ms": round(step_ms, 2),
                        "predicted_step_ms": round(pred_ms, 2),
                        "time_error_pct": round(_pct(pred_ms, step_ms), 2),
                        "measured_peak_mb": round(peak_mb, 1),
                        "predicted_peak_mb": round(pred_mb, 1),
                        "memory_error_pct": round(_pct(pred_mb, peak_mb), 2),
                    }
                )
                print(_line(rows[-1]), flush=True)
    return rows


def _line(row: dict) -> str:
    return (
        f"seq {row['seq']:>5} mbs {row['mbs']} {row['recompute']:<9} step {row['measured_step_ms']:>9.1f} ms "
        f"pred {row['predicted_step_ms']:>9.1f} ({row['time_error_pct']:+6.1f} %)  peak "
        f"{row['measured_peak_mb']:>8.0f} MiB pred {row['predicted_peak_mb']:>8.0f} ({row['memory_error_pct']:+6.1f} %)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dry-run", action="store_true", help="Tiny model on the CPU: the whole flow, quickly."
    )
    parser.add_argument("--device", default=None, help="cuda (default) | cpu (the dry run's).")
    parser.add_argument("--trainer", default="auto", choices=("auto", "reference", "megatron-core"))
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "validate_device.csv"
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="Timed steps per row (after warm-up)."
    )
    args = parser.parse_args()
    plan = DRY if args.dry_run else FULL
    if args.steps:
        plan = replace(plan, steps=args.steps)
    device = detect_device(args.device or ("cpu" if args.dry_run else "cuda"))
    trainer = pick_trainer(args.trainer, device)
    print(
        f"device {device.kind} '{device.name}', trainer {trainer}, model {model_spec(plan, plan.seqs[0])}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="validate-device-") as tmp:
        rows = run(plan, device, trainer, Path(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    worst_t = max(abs(r["time_error_pct"]) for r in rows)
    worst_m = max(abs(r["memory_error_pct"]) for r in rows)
    print(
        f"wrote {args.out}; worst time error {worst_t:.1f} % (target 5), worst memory error {worst_m:.1f} % (target 3)"
    )


if __name__ == "__main__":
    main()
