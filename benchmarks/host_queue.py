"""Does the per-op launch queue explain vTrain's near-balance rows? Two tables on vTrain's single node.

1. **The per-op queue on the analytic trace.** The host issues a layer's operators one after
   another and the GPU runs each kernel once it is issued and the previous kernel is done (CUDA's
   asynchronous launches: "control is returned to the host thread before the device completes
   the requested task", CUDA C++ Programming Guide, "Asynchronous Concurrent Execution"; PyTorch
   "CUDA semantics": "By default, GPU operations are asynchronous ... the CPU can perform other
   computations in the meantime"). With per-op host times h_i and GPU times g_i in program
   order, the stream ends at

       max_i (H_i + sum_{j >= i} g_j),    H_i = h_1 + ... + h_i,

   (`queue_finish_us`). For L identical layers of host time H and GPU time G per layer this is
   (L - 1) x max(H, G) + the one layer's max: the op order adds a one-off fill/drain per stream,
   never a per-layer loss (`periodic_steady_us` prints the per-layer step for L = 24). The table
   prints, per hidden size, tp and micro-batch, one layer under full recompute (forward,
   recomputed forward, backward), each traced op one host op at the description's
   `host_op_us`, each kernel (op_timing.fused_kernels) issued by the last op of its run: the
   whole-pass max of costs/fixed_costs.py (forward and backward apart), the per-op queue's
   per-layer step, its one-off, and vTrain's measured per-layer time (table 2). The tp
   collectives are left out (the same periodic argument holds with them in the stream).
2. **vTrain's times split exactly.** Per (hidden, tp, micro-batch, dp) and pp 1, the measured
   iteration time fits `a x L x n + b x n + c x L + d` (n micro-batches) to within 0.1 %: a is the
   time per layer and micro-batch, b per micro-batch (embedding, head, loss, data), c per layer
   and iteration (gradients, optimizer), d the rest. The same fit of the cost model's times prints
   next to it, so each residual lands on the term it belongs to.
3. **The tp all-reduce on the A100 against nccl-tests on vTrain's machine.** The description's
   intra-node link (hardware/a100-40gb.json, comm_cost.collective_time_us) against the all-reduce
   times vTrain measured with nccl-tests on its DGX A100 (VIA-Research/vTrain @f8dda84,
   `trace/a100/AR_GPU{2,4,8}_1M_1024M_LUT`, the first time column, the figures its own predictor
   prices tp all-reduces with, src/predictor.py `compute_comm_time`), at the buffer sizes of
   vTrain's tp collectives (micro-batch x 1024 x hidden x 2 bytes: 2-16 MiB).

    PYTHONPATH=. python benchmarks/host_queue.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published_runs import hardware_for, launch_script
from ranking import vtrain_runs, vtrain_times
from validate_published import Profiles, read_run

from tinker_opt.comm_cost import collective_time_us
from tinker_opt.hardware import DEFAULT_HOST_OP_US, load_hardware
from tinker_opt.profile.analytic import trace_block
from tinker_opt.profile.op_timing import OpArrays, fused_kernels, kernel_runs, op_times_us
from tinker_opt.profile.shape import Shape

LAYERS = 24
"""Layers of the periodic stream whose per-layer step is printed (vTrain's deepest model)."""
TERMS = ("per layer x mb", "per mb", "per layer", "rest")
MIB = 1 << 20
VTRAIN_ALL_REDUCE_US = {
    2: {1: 44.21, 2: 53.43, 4: 61.18, 8: 86.90, 16: 131.9, 32: 230.0, 64: 404.7},
    4: {1: 51.40, 2: 55.74, 4: 77.32, 8: 116.8, 16: 179.6, 32: 284.2, 64: 543.8},
    8: {1: 92.79, 2: 93.25, 4: 95.80, 8: 134.3, 16: 232.4, 32: 358.1, 64: 579.9},
}
"""GPUs -> MiB -> microseconds of one all-reduce, nccl-tests on vTrain's DGX A100 (table 3)."""


def queue_finish_us(host_us: np.ndarray, gpu_us: np.ndarray) -> float:
    """End of a launch stream: max over i of (host time through issuing op i + GPU time of ops
    i..n); op i's GPU time counts once the host has issued it and the GPU is free."""
    issued = np.cumsum(host_us)
    remaining = np.cumsum(gpu_us[::-1])[::-1]
    return float(np.max(issued + remaining)) if len(host_us) else 0.0


def periodic_steady_us(host_us: np.ndarray, gpu_us: np.ndarray, layers: int = LAYERS) -> float:
    """Per-layer step of `layers` repeats of one layer's stream (the one-off left out)."""
    many = queue_finish_us(np.tile(host_us, layers), np.tile(gpu_us, layers))
    return (many - queue_finish_us(host_us, gpu_us)) / (layers - 1)


def op_stream(ops, hardware, host_op_us: float) -> tuple[np.ndarray, np.ndarray]:
    """(host, GPU) microseconds per traced op: every op one host op, each kernel's time on the
    op that closes its run (a fused run is launched once its ops are issued)."""
    fuse = hardware.efficiency.fuse_elementwise
    kernels = fused_kernels(ops, fuse)
    times = op_times_us(OpArrays.from_ops(kernels, hardware), hardware)
    gpu = np.zeros(len(ops))
    for run, time_us in zip(kernel_runs(ops, fuse), times, strict=True):
        gpu[run[-1]] += time_us
    return np.full(len(ops), host_op_us), gpu


def bilinear_terms(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Least-squares a, b, c, d of `column` = a L n + b n + c L + d per (h, tp, mbs, dp)."""
    rows = []
    for key, group in frame.groupby(["h", "tp", "mbs", "dp"]):
        if len(group) < 6:
            continue
        design = np.c_[group.L * group.n, group.n, group.L, np.ones(len(group))]
        fit = np.linalg.lstsq(design, group[column], rcond=None)[0]
        rows.append(dict(zip(("h", "tp", "mbs", "dp", *TERMS), (*key, *fit), strict=True)))
    return pd.DataFrame(rows)


def decomposition() -> pd.DataFrame:
    """Table 2: measured and modelled terms of every pp 1 configuration (microseconds)."""
    runs = [run for run in vtrain_runs() if run.strategy["pp"] == 1]
    with tempfile.TemporaryDirectory(prefix="host-queue-") as tmp:
        modelled = vtrain_times(runs, Profiles(Path(tmp)))
    rows = []
    for run, seconds in zip(runs, modelled, strict=True):
        s, dp = run.strategy, run.n_devices // run.strategy["tp"]
        rows.append(
            dict(
                h=run.model["hidden"],
                L=run.model["layers"],
                tp=s["tp"],
                mbs=s["mbs"],
                dp=dp,
                n=s["gbs"] // (dp * s["mbs"]),
                measured=run.iteration_time_s * 1e6,
                model=seconds * 1e6,
            )
        )
    frame = pd.DataFrame(rows)
    keys = ["h", "tp", "mbs", "dp"]
    measured, model = bilinear_terms(frame, "measured"), bilinear_terms(frame, "model")
    table = measured.merge(model, on=keys, suffixes=(" meas", " model"))
    return table.round(0).astype(int)


def queue_table(per_layer: dict[tuple[int, int, int], float]) -> pd.DataFrame:
    """Table 1: one layer's whole-pass max against the per-op queue, tp 1-8, micro-batch 1-4."""
    by_hidden = {run.model["hidden"]: run for run in vtrain_runs()}
    rows = []
    for hidden, run in sorted(by_hidden.items()):
        model = read_run(run, launch_script(run))[0]
        hardware = hardware_for(run)
        host_op_us = hardware.host_op_us if hardware.host_op_us is not None else DEFAULT_HOST_OP_US
        for tp in (1, 2, 4, 8):
            for mbs in (1, 2, 4):
                trace = trace_block(model, "layer", Shape(tp=tp, mbs=mbs))
                hf, gf = op_stream(trace.fwd_ops, hardware, host_op_us)
                hb, gb = op_stream(trace.bwd_ops, hardware, host_op_us)
                host, gpu = np.r_[hf, hf, hb], np.r_[gf, gf, gb]
                steady = periodic_steady_us(host, gpu)
                one_off = queue_finish_us(host, gpu) - max(host.sum(), gpu.sum())
                rows.append(
                    dict(
                        h=hidden,
                        tp=tp,
                        mbs=mbs,
                        host=host.sum(),
                        gpu=gpu.sum(),
                        pass_max=2 * max(hf.sum(), gf.sum()) + max(hb.sum(), gb.sum()),
                        queue_step=steady,
                        one_off=one_off,
                        measured=per_layer.get((hidden, tp, mbs), np.nan),
                    )
                )
    return pd.DataFrame(rows).round(0)


def collective_table() -> pd.DataFrame:
    """Table 3: the A100 description's all-reduce against vTrain's nccl-tests, per size."""
    link = load_hardware("a100-40gb").intra_node
    rows = []
    for gpus, by_size in VTRAIN_ALL_REDUCE_US.items():
        for mib, measured in by_size.items():
            model = collective_time_us(
                "all_reduce", gpus, mib * MIB, link.bandwidth_gbs, link.latency_us
            )
            rows.append(dict(gpus=gpus, MiB=mib, nccl_tests=measured, model=model))
    table = pd.DataFrame(rows)
    table["model - measured"] = table.model - table.nccl_tests
    return table.round(1)


def main() -> int:
    terms = decomposition()
    per_layer = terms.groupby(["h", "tp", "mbs"])["per layer x mb meas"].median().to_dict()
    print(
        "== 1. one layer and micro-batch under full recompute (us): whole-pass max vs per-op queue =="
    )
    print(queue_table(per_layer).to_string(index=False))
    print("\n== 2. vTrain pp 1 times split as a L n + b n + c L + d (us), measured and modelled ==")
    print(terms.to_string(index=False))
    print(
        "\n== 3. one all-reduce (us): hardware/a100-40gb.json against nccl-tests on vTrain's A100 =="
    )
    print(collective_table().to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
