"""Which strategy wins: the model's ranking of jobs measured under several strategies.

A job is one model on one set of devices with one global batch; its strategies are the measured
runs of it. Every strategy is simulated through the one cost model, on the same path as
validate_published.py (launch script -> script reader -> analytic profile -> CostModel.evaluate,
`cost_model_for`), and per job this prints:

* n: strategies; regret: the measured time of the model's fastest over the measured fastest,
  minus 1 (what picking by the model costs);
* pairs: the share of strategy pairs the model orders as measured; a pair whose measured times
  are within 3 % of each other is a tie and not counted;
* rho: Spearman's rank correlation of modelled and measured times (Pearson on ranks);
* |err|: the mean absolute error of the modelled iteration time.

Sources:

* vTrain's single-node ground truth (data/vtrain_ground_truth_single.csv, its source and
  assumptions in data/vtrain_ground_truth_single.md): GPT models on 2-8 A100s, 144 jobs;
* the published-runs files (the shared calibration file, data/heldout_runs.json,
  data/blackwell_runs.json): every group of timed rows that share model, devices, hardware and
  global batch (the Megatron-MoE-ModelZoo Qwen3-235B strategies on 256 H100s among them).

    PYTHONPATH=. python benchmarks/ranking.py [--source vtrain|published|all] [--jobs N]
        [--runs RUNS.json ...]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published_runs import (
    DEFAULT_RUNS_FILE,
    PublishedRun,
    hardware_for,
    launch_script,
    load_runs,
    normalised_strategy,
)
from validate_published import Profiles, cost_model_for, evaluate_all, read_run

from tinker_opt.profile.space import SpaceLimits
from tinker_opt.script.reader import read_script_text

DATA = Path(__file__).resolve().parent / "data"
VTRAIN_FILE = DATA / "vtrain_ground_truth_single.csv"
PUBLISHED_FILES = (DEFAULT_RUNS_FILE, DATA / "heldout_runs.json", DATA / "blackwell_runs.json")
TIE = 0.03
"""Measured times within 3 % of each other are a tie: the pair is not counted."""
VTRAIN_VOCAB = 50257
"""vTrainConfig's default vocab_size (GPT-2's tokenizer); Megatron pads it to a multiple of 128."""
VTRAIN_LIMITS = SpaceLimits(max_npu=8, max_mbs=8, prof_cp=(1,))
"""One analytic profile per vTrain model shape: tp up to 8, every micro-batch size of the file."""


@dataclass(frozen=True)
class JobScore:
    """The ranking figures of one job."""

    name: str
    n: int
    regret: float
    pairs_right: int
    pairs_counted: int
    rho: float
    mean_abs_error: float
    fastest: str
    picked: str

    @property
    def pair_share(self) -> float:
        return self.pairs_right / self.pairs_counted if self.pairs_counted else 1.0


def score_job(name: str, labels: list[str], measured, predicted) -> JobScore:
    """Regret, pairs ordered as measured (ties within TIE left out), Spearman's rho, mean |error|."""
    m, p = np.asarray(measured, dtype=float), np.asarray(predicted, dtype=float)
    best, picked = int(np.argmin(m)), int(np.argmin(p))
    right = counted = 0
    for i in range(len(m)):
        for j in range(i + 1, len(m)):
            if abs(m[i] - m[j]) <= TIE * min(m[i], m[j]):
                continue
            counted += 1
            right += int((m[i] - m[j]) * (p[i] - p[j]) > 0)
    rho = float(pd.Series(m).rank().corr(pd.Series(p).rank()))
    return JobScore(
        name=name,
        n=len(m),
        regret=float(m[picked] / m[best] - 1),
        pairs_right=right,
        pairs_counted=counted,
        rho=rho if np.isfinite(rho) else 0.0,
        mean_abs_error=float(np.mean(np.abs(p / m - 1))),
        fastest=labels[best],
        picked=labels[picked],
    )


def vtrain_runs(path: Path = VTRAIN_FILE) -> list[PublishedRun]:
    """vTrain's rows as published runs: GPT (LayerNorm, GeLU, learned positions), fp16, full
    recompute of every layer (`use_checkpoint: true`), on the A100 40 GB (ASSUMPTION, see the
    data file's note)."""
    runs = []
    with path.open(encoding="utf-8") as handle:
        for i, row in enumerate(csv.reader(handle)):
            if i == 0:
                continue
            gpus, gbs, mbs, hidden, heads, layers, seq, tp, dp, pp = (int(v) for v in row[:10])
            strategy = normalised_strategy(
                {"tp": tp, "pp": pp, "dp": dp, "mbs": mbs, "gbs": gbs, "recompute": "full"}
            )
            strategy["precision"] = "fp16"
            runs.append(
                PublishedRun(
                    run_id=f"vtrain{i:04d}",
                    model={
                        "layers": layers,
                        "hidden": hidden,
                        "ffn": 4 * hidden,
                        "heads": heads,
                        "seq": seq,
                        "vocab": VTRAIN_VOCAB,
                    },
                    strategy=strategy,
                    hardware_id="a100_40gb_sxm",
                    hardware_name="A100 (vTrain single node)",
                    n_devices=gpus,
                    measured={"iteration_time_s": float(row[10]) / 1e3},
                    # "dense": launch_script writes no --use-flash-attn (Megatron-DeepSpeed's
                    # fused softmax, as vTrain's model runs it).
                    category="dense",
                )
            )
    return runs


def label(run: PublishedRun) -> str:
    """A vTrain strategy in a few characters (tp, pp, dp, mbs); a published row by its id."""
    if not run.run_id.startswith("vtrain"):
        return run.run_id
    s = run.strategy
    return f"t{s['tp']}p{s['pp']}d{run.n_devices // (s['tp'] * s['pp'])}m{s['mbs']}"


def job_key(run: PublishedRun) -> str:
    """Same model, same devices (count and kind), same global batch."""
    s = run.strategy
    return json.dumps(
        [run.model, run.n_devices, run.hardware_id, s["gbs"], s.get("precision", "bf16")],
        sort_keys=True,
    )


def jobs_of(runs: list[PublishedRun]) -> list[list[PublishedRun]]:
    """Timed runs grouped by job; jobs of two or more strategies."""
    groups: dict[str, list[PublishedRun]] = defaultdict(list)
    for run in runs:
        if run.iteration_time_s is not None:
            groups[job_key(run)].append(run)
    return [group for group in groups.values() if len(group) >= 2]


def vtrain_times(runs: list[PublishedRun], profiles: Profiles) -> list[float]:
    """Modelled seconds per iteration of each vTrain run: the validate_published path with one
    analytic profile per model shape."""
    times = []
    for run in runs:
        text = launch_script(run)
        model, strategy, _, job = read_run(run, text)
        # The gradient buffer's dtype as `simulate` reads it: fp16 training without
        # --accumulate-allreduce-grads-in-fp32 reduces fp16 gradients (script/reader.py).
        precision = read_script_text(text, f"{run.run_id}.sh").train.optimizer_precision
        job = dataclasses.replace(job, optimizer_precision=precision)
        hardware = hardware_for(run)
        name = f"{model.num_layers}L{model.hidden_size}h"
        folder = profiles.folder(name, model, VTRAIN_LIMITS, hardware)
        evaluation = cost_model_for(run, model, folder, hardware, job).evaluate(strategy)
        times.append(evaluation.iteration_time_ms / 1e3)
    return times


def vtrain_name(run: PublishedRun) -> str:
    m = run.model
    return f"L{m['layers']} h{m['hidden']} {run.n_devices}gpu gbs{run.strategy['gbs']}"


def published_name(run: PublishedRun) -> str:
    return f"{run.model.get('name', run.run_id)} {run.n_devices}x{run.hardware_id} gbs{run.strategy['gbs']}"


def print_source(title: str, jobs, times: dict[str, float], name_of) -> list[JobScore]:
    """The per-job table and the source's summary."""
    print(f"\n== {title}: {len(jobs)} jobs ==")
    print(
        f"{'job':44} {'n':>3} {'regret %':>8} {'pairs':>9} {'rho':>6} {'|err| %':>7}  measured best -> model's pick"
    )
    scores = []
    for group in jobs:
        score = score_job(
            name_of(group[0]),
            [label(r) for r in group],
            [r.iteration_time_s for r in group],
            [times[r.run_id] for r in group],
        )
        scores.append(score)
        print(
            f"{score.name[:44]:44} {score.n:3d} {100 * score.regret:8.1f} "
            f"{score.pairs_right:4d}/{score.pairs_counted:<4d} {score.rho:6.2f} "
            f"{100 * score.mean_abs_error:7.1f}  {score.fastest} -> {score.picked}"
        )
    print_summary(title, scores)
    return scores


def print_summary(title: str, scores: list[JobScore]) -> None:
    """Jobs within the targets (regret <= 2 %, rho >= 0.8), pooled pair share, mean |error|."""
    if not scores:
        return
    regrets = np.array([s.regret for s in scores])
    rhos = np.array([s.rho for s in scores])
    right = sum(s.pairs_right for s in scores)
    counted = sum(s.pairs_counted for s in scores)
    print(
        f"summary {title}: {len(scores)} jobs; regret <= 2 % in {int((regrets <= 0.02).sum())}, "
        f"mean {100 * regrets.mean():.1f} %, max {100 * regrets.max():.1f} %; pairs ordered as "
        f"measured {right}/{counted} = {100 * right / max(counted, 1):.1f} %; rho >= 0.8 in "
        f"{int((rhos >= 0.8).sum())}, min {rhos.min():.2f}, median {np.median(rhos):.2f}; "
        f"mean |error| {100 * np.mean([s.mean_abs_error for s in scores]):.1f} %"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("vtrain", "published", "all"), default="all")
    parser.add_argument("--jobs", type=int, help="first N vTrain jobs only (a quick look)")
    parser.add_argument(
        "--runs", nargs="*", default=[str(p) for p in PUBLISHED_FILES], help="published-runs files"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ranking-") as tmp:
        profiles = Profiles(Path(tmp))
        if args.source in ("vtrain", "all"):
            jobs = jobs_of(vtrain_runs())[: args.jobs]
            runs = [run for group in jobs for run in group]
            times = dict(zip([r.run_id for r in runs], vtrain_times(runs, profiles), strict=True))
            print_source("vTrain single node (A100)", jobs, times, vtrain_name)
        if args.source in ("published", "all"):
            for path in args.runs:
                if not Path(path).is_file():
                    print(f"\n{path} not found: skipped")
                    continue
                jobs = jobs_of(load_runs(Path(path)))
                runs = [run for group in jobs for run in group]
                rows = evaluate_all(runs, profiles, None)
                times = {run.run_id: pred.iteration_s for run, pred, _, _ in rows}
                print_source(Path(path).name, jobs, times, published_name)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
