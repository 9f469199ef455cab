"""`tinker-opt all` on every MindSpeed-LLM FSDP2 fixture at 1, 2 and 4 nodes, and the ZeRO memory hand check.

    PYTHONPATH=. python benchmarks/fsdp2_search.py [--nodes 1,2,4] [--out benchmarks/results/fsdp2_search.md]

Part 1, per fixture and node count (16 NPUs a node, the analytic 910B device, 57000 MB per device,
a global batch of GBS samples): the solver's status, the wall seconds of the whole `all` run
(profile + search + results folder), the best strategy, its modelled iteration time and peak
memory, and whether the tuned script with its tuned YAML copy reads back as that strategy.

Part 2, the hand check: `simulate --detail`'s per-stage weights / gradients / optimizer states
for ZeRO 0-3 on one fixture against bytes computed from the parameter count P (dense parameters,
one rank's share with the data-parallel size n = dp x cp, no tp / ep):
  weights 2 B/param (bf16), gradients 4 B (fp32), optimizer 12 B (fp32 master + Adam m, v);
  ZeRO 0: 2P + 4P + 12P; 1: 2P + 4P + 12P/n; 2: 2P + (4P + 12P)/n; 3: (2P + 4P + 12P)/n.
P is counted from the Hugging Face config (embedding V*h, head V*h untied, per layer q/k/v/o
projections h*(a*d) + 2*h*(g*d) + (a*d)*h, the gated MLP 3*h*f, two RMSNorm weights 2*h and
Qwen3's q/k norms 2*d, the final norm h). Transient: ZeRO 0 and 1 add nothing to the blocks' own
peak T0 (the ZeRO-0 column); ZeRO 2 adds one unit's fp32 gradients before their reduce-scatter,
4U, and ZeRO 3 also the bf16 weights of the computing and one prefetched unit, 2 x 2U, where U is
the largest FSDP unit (here the embedding, V*h parameters).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tinker_opt.script.reader import read_script
from tinker_opt.strategy import Strategy

ROOT = Path(__file__).resolve().parents[1]
FSDP2 = ROOT / "tests" / "fixtures" / "fsdp2"
GPT_OSS_CONFIG = FSDP2 / "gpt_oss_20b_config.json"
FIXTURES = {  # script -> the --model-config it needs (None: its model path is beside it)
    "pretrain_qwen3_8b_4k_fsdp2_A3.sh": None,
    "pretrain_qwen3_14b_4k_fsdp2_A3_optimized.sh": None,
    "pretrain_qwen3_30b_4k_fsdp2_A3.sh": None,
    "pretrain_qwen3_30b_4k_fsdp2_ep_A3.sh": None,
    "pretrain_gpt_oss_20b_4k_fsdp2_A3.sh": GPT_OSS_CONFIG,
    "tune_gpt_oss_20b_128k_fsdp2_A3.sh": GPT_OSS_CONFIG,
}
MEMORY_MB = 57000
GBS = 64
MiB = 2**20


def tinker(*args: str) -> subprocess.CompletedProcess:
    """Run the CLI in a subprocess, as a user would (its wall time includes the start-up)."""
    return subprocess.run(
        [sys.executable, "-m", "tinker_opt.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )


def label(s: Strategy, gbs: int) -> str:
    rc = {"none": "-", "selective": "sel", "full": "full"}[s.recompute]
    cp = f"{s.cp}" + (
        {"ulysses_cp_algo": "u", "megatron_cp_algo": "r"}.get(s.cp_algo, "") if s.cp > 1 else ""
    )
    return f"tp{s.tp} dp{s.dp} ep{s.ep} cp{cp} mbs{s.mbs} ga{gbs // (s.dp * s.mbs)} rc:{rc} zero{s.zero}"


def run_all(script: Path, config: Path | None, nodes: int, work: Path) -> dict:
    """One `tinker-opt all` run and what it wrote."""
    out = work / f"{script.stem}-{nodes}"
    args = [
        "all",
        str(script),
        "--device",
        "analytic",
        "--hardware",
        "910b",
        "--max-mbs",
        "2",
        "--num-nodes",
        str(nodes),
        "--num-npus-per-node",
        "16",
        "--memory-limit",
        str(MEMORY_MB),
        "--global-batch-size",
        str(GBS),
        "--save-path",
        str(out / "prof"),
        "--output-dir",
        str(out / "res"),
        "--top-k",
        "2",
        "--cpus",
        "1",
        "--quiet",
    ]
    if config is not None:
        args += ["--model-config", str(config)]
    start = time.perf_counter()
    proc = tinker(*args)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"status": f"error: {proc.stderr.strip()[-120:]}", "wall_s": wall}
    folder = next((out / "res").iterdir())
    summary = json.loads((folder / "summary.json").read_text())
    best = Strategy.from_dict(summary["best"]["strategy"])
    tuned = next((folder / "configs").glob("*rank1*.sh"), None)
    if tuned is None:
        reads_back = "no tuned script"
    else:
        back = read_script(tuned, model_config=config or _model_config(script))
        reads_back = (
            back.train.strategy == best
            and back.train.global_batch_size == GBS
            and tuned.with_suffix(".yaml").is_file()
        )
    return {
        "status": summary["status"],
        "wall_s": wall,
        "best": label(best, GBS),
        "time_ms": summary["best"]["iteration_time_ms"],
        "memory_mb": summary["best"]["peak_memory_mb"],
        "reads_back": reads_back,
    }


def _model_config(script: Path) -> Path:
    return read_script(script).fsdp2.model_config_path


def search_table(nodes: list[int], work: Path) -> list[str]:
    rows = [
        "| fixture | nodes | status | wall s | best strategy | iteration ms | memory MB | tuned reads back |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, config in FIXTURES.items():
        for n in nodes:
            r = run_all(FSDP2 / name, config, n, work)
            rows.append(
                f"| {name.removesuffix('.sh')} | {n} | {r['status']} | {r['wall_s']:.1f} | {r.get('best', '')} | "
                f"{r.get('time_ms', float('nan')):.1f} | {r.get('memory_mb', float('nan')):.0f} | "
                f"{r.get('reads_back', '')} |"
            )
            print(rows[-1], flush=True)
    return rows


def dense_param_count(c: dict) -> tuple[int, int, int]:
    """(total, per decoder layer, largest of embedding / head) parameters of a dense Qwen3 config."""
    h, f, v, a, g = (
        c["hidden_size"],
        c["intermediate_size"],
        c["vocab_size"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
    )
    d = c.get("head_dim", h // a)
    layer = h * a * d + 2 * h * g * d + a * d * h + 3 * h * f + 2 * h + 2 * d
    embed = v * h
    total = (
        c["num_hidden_layers"] * layer
        + embed * (1 if c.get("tie_word_embeddings", True) else 2)
        + h
    )
    return total, layer, embed


def _hand_profile(script: Path, work: Path) -> Path:
    """The analytic 910B profile of `script` at tp 1, mbs 1 (the hand check's shard shape)."""
    prof = work / "hand-prof"
    proc = tinker(
        "profile",
        str(script),
        "--device",
        "analytic",
        "--hardware",
        "910b",
        "--prof-tp",
        "1",
        "--max-mbs",
        "1",
        "--save-path",
        str(prof),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    return next(prof.iterdir())


def _simulated_stage(script: Path, folder: Path, work: Path, zero: int, devices: int) -> dict:
    """`simulate --json`'s first stage for tp 1, dp = devices, mbs 1 under ZeRO `zero`."""
    strategy = work / f"z{zero}.json"
    strategy.write_text(json.dumps({"tp": 1, "dp": devices, "zero": zero, "mbs": 1}))
    proc = tinker(
        "simulate",
        str(script),
        "--profiled-data-path",
        str(folder),
        "--strategy",
        str(strategy),
        "--num-nodes",
        "1",
        "--num-npus-per-node",
        str(devices),
        "--memory-limit",
        "1000000",
        "--global-batch-size",
        str(GBS),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["stages"][0]


def hand_check(work: Path) -> list[str]:
    """simulate --detail's memory split for ZeRO 0-3 (Qwen3-8B, 16 NPUs, tp 1, dp 16) against the formula."""
    script = FSDP2 / "pretrain_qwen3_8b_4k_fsdp2_A3.sh"
    folder = _hand_profile(script, work)
    config = json.loads((FSDP2 / "models" / "Qwen3-8B" / "config.json").read_text())
    total, layer, embed = dense_param_count(config)
    n = 16
    expected = {
        0: (2 * total, 4 * total, 12 * total),
        1: (2 * total, 4 * total, 12 * total / n),
        2: (2 * total, 4 * total / n, 12 * total / n),
        3: (2 * total / n, 4 * total / n, 12 * total / n),
    }
    unit = max(layer, embed)
    gathered = {0: 0, 1: 0, 2: 4 * unit, 3: 4 * unit + 2 * 2 * unit}
    rows = [
        f"Qwen3-8B: P = {total:,} parameters (a layer {layer:,}, embedding = head {embed:,}); 16 NPUs, tp 1, "
        "dp 16, mbs 1, no recompute; MB = MiB; each cell model / hand",
        "| zero | weights MB | gradients MB | optimizer MB | transient MB | total MB |",
        "|---|---|---|---|---|---|",
    ]
    base = None
    for zero in (0, 1, 2, 3):
        stage = _simulated_stage(script, folder, work, zero, n)
        w, g, o = (x / MiB for x in expected[zero])
        base = stage["transient_mb"] if base is None else base  # T0, the ZeRO-0 run's
        tr = base + gathered[zero] / MiB
        rest = stage["memory_mb"] - sum(
            stage[k] for k in ("weights_mb", "gradients_mb", "optimizer_mb", "transient_mb")
        )
        rows.append(
            f"| {zero} | {stage['weights_mb']:.1f} / {w:.1f} | {stage['gradients_mb']:.1f} / {g:.1f} | "
            f"{stage['optimizer_mb']:.1f} / {o:.1f} | {stage['transient_mb']:.1f} / {tr:.1f} | "
            f"{stage['memory_mb']:.1f} / {w + g + o + tr + rest:.1f} |"
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1,2,4")
    parser.add_argument(
        "--out", type=Path, default=None, help="Also write the tables to this Markdown file."
    )
    parser.add_argument(
        "--only", choices=("search", "hand"), default=None, help="Run one part only."
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lines = (
            []
            if args.only == "hand"
            else search_table([int(n) for n in args.nodes.split(",")], work) + [""]
        )
        lines += [] if args.only == "search" else hand_check(work)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
