"""Is a layer host-bound? Kernel launches per layer against the layer's modelled GPU time.

Between two host syncs the GPU runs behind the host, so a stretch of work costs
max(GPU time, host time), host time = kernels launched x host cost per launch. This prints, per
layer and micro-batch (forward + backward), the kernels the analytic trace launches (one per
traced op that moves data, no fusion: the most the trace can launch), plus the per-expert GEMMs
of Transformer Engine's grouped GEMM (TE common/gemm/cublaslt_gemm.cu multi_stream_cublas_gemm:
one cuBLAS GEMM per expert on 4 compute streams, fc1 and fc2 forward, dgrad and wgrad of each
backward: 6 per local expert), the host time of those launches at the CPU launch cost Holistic
Trace Analysis gives as usual ("between 5-20 microseconds", facebookresearch/
HolisticTraceAnalysis docs/source/features/cuda_kernel_launch_stats.rst), the layer's modelled
GPU time on the analytic device, and the host cost per launch at which host time would equal
GPU time + the measured gap per layer and micro-batch (benchmarks/moe_breakdown.py).

    PYTHONPATH=. python benchmarks/host_launches.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published_runs import hardware_for, launch_script, load_runs
from validate_published import read_run

from tinker_opt.hardware import load_hardware
from tinker_opt.profile.analytic import phase_times_us, trace_block
from tinker_opt.profile.op_timing import fused_kernels
from tinker_opt.profile.shape import Shape
from tinker_opt.script.reader import read_script_text

HELDOUT = Path(__file__).resolve().parent / "data" / "heldout_runs.json"
KISTI_LOG = Path("tests/fixtures/logs/kisti-v100x4-gpt345m-tp4-core050/log.txt")
LAUNCH_US = (5.0, 20.0)
"""Host cost of one kernel launch, low and high (HTA: "usually between 5-20 microseconds")."""
GEMMS_PER_EXPERT = 6
"""fc1 + fc2 forward, their dgrad + wgrad backward: one cuBLAS launch each per local expert."""

QWEN3_ROWS = (
    # run id, tp, ep, measured gap per layer and micro-batch (ms, benchmarks/moe_breakdown.py)
    ("mz_qwen3_235b_deepep_tp2_ep32_pp8_vpp4", 2, 32, 0.10),
    ("mz_qwen3_235b_a2a_tp2_ep8_pp32_vpp3", 2, 8, 6.19),
    ("mz_qwen3_235b_deepep_tp4_ep8_pp8_vpp4_norecompute", 4, 8, 4.67),
)


def layer_line(name: str, model, block: str, shape: Shape, hardware, extra: int, gap_ms: float):
    """One printed row: launches, host ms at the low / high cost, GPU ms, break-even cost."""
    trace = trace_block(model, block, shape)
    ops = trace.fwd_ops + trace.bwd_ops
    launches = len(fused_kernels(ops, fuse=False)) + extra
    times = phase_times_us(ops, hardware)
    gpu_ms = (times["fwd"] + times["bwd"]) / 1e3
    low, high = (launches * us / 1e3 for us in LAUNCH_US)
    needed = (gpu_ms + gap_ms) * 1e3 / launches
    return (
        f"{name:52s} {launches:5d} {low:6.2f} {high:6.2f} {gpu_ms:7.2f} {gap_ms:6.2f} {needed:8.0f}"
    )


def main() -> int:
    print(
        f"{'layer (per micro-batch, fwd + bwd)':52s} {'kern':>5s} {'h@5us':>6s} {'h@20us':>6s} "
        f"{'gpu ms':>7s} {'gap':>6s} {'us/kern':>8s}"
    )
    log = KISTI_LOG.read_text(encoding="utf-8")
    launch = next(line for line in log.splitlines() if "pretrain_gpt.py" in line)
    # The argument dump says pipeline size 1 (tests/fixtures/logs/.../source.md).
    text = launch.split("$", 1)[1].replace(
        "--pipeline-model-parallel-size 8", "--pipeline-model-parallel-size 1"
    )
    info = read_script_text(text, "kisti.sh")
    # 385.1 ms measured, 285.0 predicted (check), 4 micro-batches x 24 layers.
    kisti_gap = (385.1 - 285.0) / (4 * 24)
    print(
        layer_line(
            "kisti GPT-345M layer tp4 sp mbs4 (V100)",
            info.model,
            "layer",
            Shape(tp=4, sp=True, cp=1, ep=1, etp=1, mbs=4),
            load_hardware("v100-32gb"),
            0,
            kisti_gap,
        )
    )
    runs = {run.run_id: run for run in load_runs(HELDOUT)}
    for run_id, tp, ep, gap in QWEN3_ROWS:
        run = runs[run_id]
        model, _, _, _ = read_run(run, launch_script(run))
        local = model.num_experts // ep
        print(
            layer_line(
                f"{run_id} ({local} local)",
                model,
                "layer.moe",
                Shape(tp=tp, sp=True, cp=1, ep=ep, etp=1, mbs=1),
                hardware_for(run, None),
                GEMMS_PER_EXPERT * local,
                gap,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
