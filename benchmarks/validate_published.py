"""Validate the analytic device + cost model against published training runs.

For each run of a published-runs file (default: shared/data/published_calibration.json; any file
of that format): write the Megatron-LM launch script of the run, read it back with the script
reader (or, when the reader is not in this tree, build the ModelSpec directly and say so), profile
the model analytically on the run's hardware description, simulate the published strategy with
CostModel.evaluate and print predicted against measured iteration time, activation memory and
parameter + optimizer memory, with each row's error and the mean / max absolute errors.

    PYTHONPATH=. python benchmarks/validate_published.py [RUNS.json] [--hardware NAME|FILE]
        [--fit [--fix-memory]] [--only NAME]

The held-out rows (benchmarks/data/heldout_runs.json: published MoE, context-parallel and H100
runs that are not in the shared file, never fitted to) go through the same code path:
`validate_published.py benchmarks/data/heldout_runs.json`.

Activation memory: the transformer-layer activations in flight on the first pipeline stage, as
Korthikanti et al. count them (their figures, as Calculon transcribes and compares them, leave
out the embedding and output layer; the 22B no-recompute figure is exactly 48 layers of their
per-layer formula). The cost model's whole first stage, embedding / head included, is printed
beside it ("stage"). Rows that give only a percentage of the no-recompute baseline are compared
as that percentage times the measured baseline of the same model and layout ("d" rows).
Every row of the file is evaluated: dense, context-parallel, FP8 and MoE rows (their free-text
strategy fields are read as typed knobs by published_runs.normalised_strategy). Per row it also
prints the modelled peak of the busiest stage against the device's memory; a row that ran (it has
a measured time) must not be modelled above its device. Errors are summarised per device kind,
FP8 rows apart. `--fit` fits the hardware descriptions' asymptotic efficiencies to the timed rows
(published_fit.py: matmul, memory unless `--fix-memory`, then the FP8 matmul one on FP8 rows;
physical parameters shared by every row of a device, never one per row) and prints them. The
cost model prices the overlap flags (costs/overlap.py); "hidden" is the time with the remaining
exposed communication those flags target taken off as well, a lower bound.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published_fit import Efficiencies, fit_time_parameters, with_efficiency
from published_report import print_table
from published_runs import (
    DEFAULT_RUNS_FILE,
    PublishedRun,
    hardware_for,
    launch_script,
    load_runs,
    model_spec_of,
    strategy_of,
)

from tinker_opt.config import setting
from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.job import JOB_DEFAULTS, JobOptions
from tinker_opt.hardware import HardwareSpec
from tinker_opt.profile.analytic import (
    analytic_meta,
    blocks_frame,
    trace_space,
    write_analytic_folder,
)
from tinker_opt.profile.space import SpaceLimits, profile_space
from tinker_opt.profile.store import load_profiled_data
from tinker_opt.specs import ClusterSpec, ModelSpec
from tinker_opt.strategy import Strategy

GIB = 2**30


@dataclass(frozen=True)
class Prediction:
    iteration_s: float
    activation_gib: float
    """Transformer-layer activations in flight on the first stage (what the paper counts)."""
    stage_activation_gib: float
    """All activations of the first stage: the layers plus the embedding (and head when pp = 1)."""
    params_optimizer_gib: float
    peak_gib: float
    """The modelled peak of the busiest stage (Evaluation.peak_memory_mb): what the search holds
    against the memory limit."""
    device_gib: float
    """The device's memory (the hardware description's memory_gb, read as GiB as the search does)."""
    hideable_s: float = 0.0
    """Exposed communication the run's overlap flags would hide at most (not priced by the model
    yet): the tensor-parallel collectives of every micro-batch with `--use-mc2` /
    `--tp-comm-overlap`, the data-parallel gradient sync with `--overlap-grad-reduce`."""


STATED_OPTIMIZER_DTYPES = ("--grad-reduce-in-bf16", "--use-precision-aware-optimizer")
"""Flags whose optimizer dtypes a row states (the Megatron-Bridge / NeMo 2 recipes' bf16 gradient
reduction). The reader's implied fp16 gradient buffer of `--fp16` rows is not passed: the
Korthikanti et al. fp16 rows measure the fp32-gradient figure (45.56 GiB against 46.47 modelled,
41.30 with an fp16 buffer)."""


def read_run(run: PublishedRun, text: str) -> tuple[ModelSpec, Strategy, str, JobOptions]:
    """Model and strategy of the run's launch script: the script reader when present, else direct;
    with the job options the script sets that the rows use (the optimizer's dtypes:
    `--grad-reduce-in-bf16`, the precision-aware optimizer; the `--recompute-modules` a
    Megatron-Core row lists, or MindSpeed's swap policy implies: script/swap_recompute.py;
    MindSpeed's `--reuse-fp32-param` and `--swap-attention`, as `simulate` passes them:
    verbs/common.py job_options), the rest at their defaults."""
    try:
        from tinker_opt.script.reader import read_script_text
    except ImportError:
        return (
            model_spec_of(run),
            strategy_of(run),
            "direct ModelSpec / Strategy (script reader not in this tree)",
            JOB_DEFAULTS,
        )
    info = read_script_text(text, f"{run.run_id}.sh")
    job = JOB_DEFAULTS
    if any(flag in text for flag in STATED_OPTIMIZER_DTYPES):
        job = dataclasses.replace(JOB_DEFAULTS, optimizer_precision=info.train.optimizer_precision)
    if info.train.recompute_modules:
        job = dataclasses.replace(job, recompute_modules=info.train.recompute_modules)
    if info.train.reuse_fp32_param:
        job = dataclasses.replace(job, reuse_fp32_param=True)
    if info.train.swap_attention:
        job = dataclasses.replace(job, swap_attention=True)
    return info.model, info.train.strategy, "script reader", job


def limits_for(run: PublishedRun) -> SpaceLimits:
    """The analytic profile space: the run's tp (so the run's shape is profiled) up to 8, mbs up to
    4, the run's own cp and ep."""
    s = run.strategy
    return SpaceLimits(
        max_npu=max(8, s["tp"]),
        max_mbs=max(4, s["mbs"]),
        extra_mbs=(s["mbs"],),
        prof_cp=(s["cp"],),
        prof_ep=(s["ep"],) if run.model.get("moe") else None,
    )


def cost_model_for(
    run: PublishedRun,
    model: ModelSpec,
    profile_dir: Path,
    hardware: HardwareSpec,
    job: JobOptions = JOB_DEFAULTS,
) -> CostModel:
    """The cost model of the run's cluster on the analytic profile in `profile_dir`."""
    # Nodes of the description's size (a GB200 compute tray holds 4 GPUs, a DGX 8).
    per_node = min(hardware.devices_per_node, run.n_devices)
    cluster = ClusterSpec(
        num_nodes=max(1, run.n_devices // per_node),
        devices_per_node=per_node,
        memory_limit_mb=hardware.memory_gb * 1024,
    )
    return CostModel.from_profile(
        load_profiled_data(profile_dir),
        model,
        cluster,
        run.strategy["gbs"],
        hardware=hardware,
        job=job,
    )


def predict(
    run: PublishedRun,
    model: ModelSpec,
    strategy: Strategy,
    profile_dir: Path,
    hardware: HardwareSpec,
    job: JobOptions = JOB_DEFAULTS,
) -> Prediction:
    """Simulate the published strategy on the analytic profile with the cost model."""
    cost = cost_model_for(run, model, profile_dir, hardware, job)
    evaluation = cost.evaluate(strategy)
    coefficients = cost.coefficients(strategy)
    stages = coefficients.stage_costs(
        strategy.stage_layers(model.num_layers), strategy.recompute_num_layers or 0
    )
    first = stages[0]
    v = strategy.vpp
    non_layer_x_v = int(coefficients.stage_inflight_x_v[0]) * int(coefficients.stage_act_bytes[0])
    # The layers' own communication (tp / cp / MoE collectives; the stage's p2p left out) of the
    # slowest stage, m micro-batches of it: what tp-communication overlap could hide at most.
    slow = max(range(len(stages)), key=lambda i: stages[i].time_ns)
    layer_comm_s = (
        coefficients.num_microbatches
        * (stages[slow].comm_ns - int(coefficients.stage_comm_ns[slow]))
        / 1e9
    )
    parts = evaluation.time_breakdown_ms
    s = run.strategy
    hideable_s = (layer_comm_s if s.get("mc2") or s.get("tp_comm_overlap") else 0.0) + (
        parts["dp_sync_ms"] / 1e3 if s.get("overlap_grad_reduce") else 0.0
    )
    return Prediction(
        iteration_s=evaluation.iteration_time_ms / 1e3,
        hideable_s=hideable_s,
        activation_gib=(first.act_bytes_x_v - non_layer_x_v) / v / GIB,
        stage_activation_gib=first.act_bytes_x_v / v / GIB,
        params_optimizer_gib=(first.static_bytes_x_v - first.transient_bytes_x_v) / v / GIB,
        peak_gib=evaluation.peak_memory_mb / 1024,
        device_gib=hardware.memory_gb,
    )


class Profiles:
    """Analytic profiles per (model, space): traced once, re-timed for each hardware variant."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._traces: dict = {}
        self.trace_seconds: dict[str, float] = {}

    def folder(
        self, name: str, model: ModelSpec, limits: SpaceLimits, hardware: HardwareSpec
    ) -> Path:
        key = (model, limits)
        if key not in self._traces:
            started = time.perf_counter()
            self._traces[key] = trace_space(model, profile_space(model, limits))
            self.trace_seconds[name] = time.perf_counter() - started
        traces = self._traces[key]
        folder = self.root / f"{name}-{abs(hash((key, hardware.efficiency))) % 10**8}"
        if not folder.exists():
            blocks = blocks_frame(traces, hardware)
            write_analytic_folder(
                folder,
                blocks,
                hardware,
                analytic_meta(model, hardware, limits, len(blocks), "", 0.0),
                [],
            )
        return folder


def evaluate_all(
    runs,
    profiles: Profiles,
    hardware_override: str | None,
    efficiencies: Efficiencies | None = None,
):
    """Predict every run; `efficiencies` replaces curves' max efficiency per description name."""
    rows = []
    for run in runs:
        model, strategy, how, job = read_run(run, launch_script(run))
        model = model.with_load_imbalance(setting("profile", "moe_load_imbalance").default)
        hardware = hardware_for(run, hardware_override)
        if efficiencies and hardware.name in efficiencies:
            hardware = with_efficiency(hardware, efficiencies[hardware.name])
        name = f"{model.num_layers}L{model.hidden_size}h"
        folder = profiles.folder(name, model, limits_for(run), hardware)
        rows.append((run, predict(run, model, strategy, folder, hardware, job), how, hardware))
    return rows


def residuals(runs, profiles: Profiles, hardware_override: str | None):
    """The fit's cost: predicted / measured - 1 of each row's iteration time under some efficiencies."""

    def of(rows: list[PublishedRun], efficiencies: Efficiencies) -> list[float]:
        evaluated = evaluate_all(rows, profiles, hardware_override, efficiencies)
        return [p.iteration_s / r.iteration_time_s - 1 for r, p, _, _ in evaluated]

    return of


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "runs", nargs="?", default=str(DEFAULT_RUNS_FILE), help="published-runs JSON file"
    )
    parser.add_argument(
        "--hardware", help="hardware name or file for every run (default: by the run's id)"
    )
    parser.add_argument(
        "--fit", action="store_true", help="fit the two asymptotic efficiencies to the times first"
    )
    parser.add_argument(
        "--only", help="keep the runs whose hardware description name contains this"
    )
    parser.add_argument(
        "--fix-memory",
        action="store_true",
        help="with --fit: keep each description's memory efficiency, fit the matmul one alone",
    )
    parser.add_argument("--category", help="keep the runs of this category (moe, cp, dense_h100)")
    args = parser.parse_args(argv)
    runs = load_runs(Path(args.runs))
    if args.category:
        runs = [r for r in runs if r.category == args.category]
    if args.only:
        runs = [r for r in runs if args.only.lower() in hardware_for(r, args.hardware).name.lower()]
    with tempfile.TemporaryDirectory(prefix="validate-published-") as tmp:
        profiles = Profiles(Path(tmp))
        started = time.perf_counter()
        fitted = (
            fit_time_parameters(
                runs, residuals(runs, profiles, args.hardware), args.hardware, args.fix_memory
            )
            if args.fit
            else None
        )
        rows = evaluate_all(runs, profiles, args.hardware, fitted)
        print(f"runs file: {args.runs}")
        print(f"model from: {sorted({how for _, _, how, _ in rows})}")
        print(f"hardware: {sorted({hw.name for _, _, _, hw in rows})}")
        print(
            "analytic tracing: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in profiles.trace_seconds.items())
            + f"; total {time.perf_counter() - started:.1f} s\n"
        )
        print_table(rows, runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
