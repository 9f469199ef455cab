"""Where the predicted time of published MoE runs goes: per-layer terms and stages.

For each run of a published-runs file whose id contains one of the given words (default: every
MoE row), the same path as validate_published.py (script reader, analytic profile, cost model),
then per layer kind: the block's forward / backward / selective-recompute compute, the exposed
forward / backward collectives and the hidden rest (costs/layer_comm.py), the MoE dispatch +
combine of one direction (costs/moe_terms.moe_comm_us) and the all-to-all dispatcher's local
sorts (moe_terms.chunk_sort_us); the iteration's breakdown; the slowest stage per micro-batch;
and, when the row is measured, the gap per layer and micro-batch of the slowest stage
((measured - predicted) / (micro-batches x its layers)): a term that grows with the tokens
changes with the sequence and tp, a fixed cost per layer call does not. Then the counts a fixed
cost would scale with, on the slowest stage per step: the dispatcher's host syncs (one per MoE
layer forward, and again in a full-recompute rerun: costs/moe_host.py) and the pipeline's chunk
steps (a forward and a backward per chunk and micro-batch), with the gap per sync and per chunk
step; and the MoE layer's host issue time (costs/moe_host.py host_ops x host_op_us) beside its
GPU time per pass, the two the host rule compares.
With `--loads 1.0,1.5,2.0` also the predicted iteration time at each busiest-rank load
(profile/shape.py expert_load; the profile setting `moe_load_imbalance`, 1.25 by default): the
load a row would need to meet its measurement, read against what a source says, never fitted.

    PYTHONPATH=. python benchmarks/moe_breakdown.py [RUNS.json] [--only WORD,WORD] [--loads X,Y]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published_runs import DEFAULT_RUNS_FILE, hardware_for, launch_script, load_runs
from validate_published import Profiles, cost_model_for, limits_for, read_run

from tinker_opt.choices import Recompute
from tinker_opt.config import setting
from tinker_opt.costs.layer_comm import layer_comm_us
from tinker_opt.costs.moe_host import host_ops
from tinker_opt.costs.moe_terms import chunk_sort_us, moe_comm_us


def _cost_model(run, profiles: Profiles, load: float):
    """The run's strategy and cost model with the busiest EP rank at `load` x the mean."""
    model, s, _, job = read_run(run, launch_script(run))
    model = model.with_load_imbalance(load)
    hardware = hardware_for(run, None)
    folder = profiles.folder(
        f"{model.num_layers}L{model.hidden_size}h{load}", model, limits_for(run), hardware
    )
    return s, cost_model_for(run, model, folder, hardware, job)


def load_scan(run, profiles: Profiles, loads: list[float]) -> str:
    """Predicted iteration time (s) of the run at each busiest-rank load (module docstring)."""
    times = []
    for load in loads:
        s, cost = _cost_model(run, profiles, load)
        times.append(f"{load:g}: {cost.evaluate(s).iteration_time_ms / 1e3:.2f}")
    return "   predicted s by load: " + ", ".join(times)


def breakdown(run, profiles: Profiles) -> list[str]:
    """The lines printed for one run (module docstring)."""
    s, cost = _cost_model(run, profiles, setting("profile", "moe_load_imbalance").default)
    ev, ctx = cost.evaluate(s), cost.context
    model = ctx.model
    measured = run.iteration_time_s
    lines = [
        f"== {run.run_id}: measured {measured} s, predicted {ev.iteration_time_ms / 1e3:.2f} s",
        f"   tp {s.tp} pp {s.pp} vpp {s.vpp} ep {s.ep} etp {s.expert_tp} dp {s.dp} cp {s.cp}"
        f" mbs {s.mbs}; {model.moe_token_dispatcher_type}, load {model.moe_load_imbalance},"
        f" capacity {model.moe_expert_capacity_factor}, recompute {s.recompute}",
        "   iteration ms: " + ", ".join(f"{k} {v:.0f}" for k, v in ev.time_breakdown_ms.items()),
    ]
    for kind in ctx.kind_names:
        ep, etp = ctx.layer_shape(kind, s)
        block = ctx.cost(ctx.layer_block[kind], s, ep, etp)
        fwd, bwd, hidden = layer_comm_us(ctx, kind, s, block)
        moe = moe_comm_us(ctx, s) if kind == "moe" else 0.0
        sort = sum(chunk_sort_us(ctx, s)) if kind == "moe" else 0.0
        lines.append(
            f"   layer {kind} us: compute fwd {block.fwd_us:.0f} bwd {block.bwd_us:.0f}"
            f" selective {block.selective_recompute_us:.0f}; comm exposed fwd {fwd:.0f}"
            f" bwd {bwd:.0f} hidden {hidden:.0f}; dispatch+combine {moe:.0f}; sorts {sort:.0f}"
        )
    slow = max(ev.stages, key=lambda st: st.time_ms)
    micro = ctx.gbs // (s.mbs * s.dp)
    lines.append(
        f"   slowest stage {slow.stage}: {slow.layers} layers, {slow.time_ms:.1f} ms per"
        f" micro-batch (compute {slow.compute_ms:.1f}, comm {slow.comm_ms:.1f}), {micro}"
        " micro-batches"
    )
    if measured:
        gap = (measured * 1e3 - ev.iteration_time_ms) / (micro * max(slow.layers, 1))
        lines.append(f"   gap per layer and micro-batch: {gap:.2f} ms")
    lines += fixed_cost_counts(ctx, s, slow.layers, micro, measured, ev.iteration_time_ms)
    return lines


def fixed_cost_counts(ctx, s, layers: int, micro: int, measured, predicted_ms: float) -> list[str]:
    """Per step on the slowest stage: the dispatcher's host syncs and the chunk steps, the gap per
    each, and the MoE layer's host issue time against its GPU time (module docstring)."""
    reruns = 2 if s.recompute == Recompute.FULL else 1
    syncs = layers * micro * reruns
    steps = 2 * s.vpp * micro if s.pp > 1 else 2 * micro
    line = f"   per step: {syncs} dispatcher syncs, {steps} chunk steps"
    if measured:
        gap_ms = measured * 1e3 - predicted_ms
        line += f"; gap per sync {gap_ms / syncs:.2f} ms, per chunk step {gap_ms / steps:.2f} ms"
    if "moe" not in ctx.kind_names:
        return [line]
    ep, etp = ctx.layer_shape("moe", s)
    block = ctx.cost(ctx.layer_block["moe"], s, ep, etp)
    fwd_comm, bwd_comm, _ = layer_comm_us(ctx, "moe", s, block)
    ops_fwd, ops_bwd = host_ops(ctx, s)
    per_op = ctx.rates.host_op_us
    return [
        line,
        f"   moe layer host vs GPU us: fwd {ops_fwd} ops x {per_op:g} = {ops_fwd * per_op:.0f}"
        f" vs {block.fwd_us + fwd_comm:.0f}; bwd {ops_bwd} ops = {ops_bwd * per_op:.0f}"
        f" vs {block.bwd_us + bwd_comm:.0f}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="?", default=str(DEFAULT_RUNS_FILE))
    parser.add_argument("--only", default="", help="comma-separated words of the run ids")
    parser.add_argument("--loads", default="", help="comma-separated busiest-rank loads to scan")
    args = parser.parse_args(argv)
    words = [w for w in args.only.split(",") if w]
    loads = [float(x) for x in args.loads.split(",") if x]
    profiles = Profiles(Path(tempfile.mkdtemp(prefix="moe-breakdown-")))
    for run in load_runs(Path(args.runs)):
        if not run.model.get("moe") or (words and not any(w in run.run_id for w in words)):
            continue
        print("\n".join(breakdown(run, profiles)))
        if loads:
            print(load_scan(run, profiles, loads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
