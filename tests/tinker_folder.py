"""Test data: a Tinker 1.3 profiled-data folder written the way Tinker writes it.

Files and conventions (reference/tinker-compat.md; Ascend mstt `profiler/tinker`):
`profiled_data.csv` written with `csv.writer` (CRLF rows, every number `%.3f`, an empty row after
each (tp, sp, ep, mbs) group, config `<name>_<size>_tp<T>_sp<S>_ep<E>_mbs<B>_algo0`, blocks
`embedding, transformer_block, final_norm, post_process`, microseconds and MiB per rank, `weights`
= parameters x 2 bytes, a block that ran out of memory holding 1e9); `model_info_seq<S>.json`;
`VERSION_TinkerProfiler-1.3.3.json` (version_profiler, task_time and the profile arguments);
`p2p_intra_node.csv` (the fixed table: sizes in MB, bandwidths in GB/s).

The numbers are plausible, not measured: times from FLOPs at a fixed achieved throughput plus, for
tp > 1, the block's TP / SP collectives at a fixed link bandwidth (Tinker's times include them);
activations after Korthikanti et al. (2022) with flash attention. The exact formulas do not
matter to the tests, which compare what is read with what was written.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

EXCEPTIONAL_VALUE = 1e9
ACHIEVED_TFLOPS = 140.0
"""About half of an Ascend 910B's bf16 peak."""
TP_LINK_GBS = 90.0
"""Intra-node bandwidth behind the TP / SP collectives folded into the block times."""
MIB = 2**20
BLOCKS = ("embedding", "transformer_block", "final_norm", "post_process")
P2P_SIZES_MB = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
P2P_BANDWIDTHS_GBS = (9.8, 13.1, 15.9, 17.6, 18.4, 18.9, 19.1, 19.2, 19.3, 19.3, 19.3)


@dataclass(frozen=True)
class TinkerShape:
    """A LLaMA-like model as Tinker's profile sees it (labels and the shapes behind the numbers)."""

    model_name: str
    model_size: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    seq_length: int
    vocab_size: int = 32000
    script: str | None = None
    """A launch script with this shape (relative to the repository root), for `search SCRIPT`."""

    @property
    def prefix(self) -> str:
        return f"{self.model_name}_{self.model_size}"

    def layer_params(self) -> int:
        h, d = self.hidden_size, self.hidden_size // self.num_attention_heads
        attention = h * h * 2 + 2 * h * self.num_query_groups * d
        return attention + 3 * h * self.ffn_hidden_size + 2 * h


LLAMA2_7B = TinkerShape(
    "llama2",
    "7b",
    32,
    4096,
    11008,
    32,
    32,
    4096,
    script="tests/fixtures/scripts/pretrain_llama2_7b_ptd.sh",
)
LLAMA2_70B = TinkerShape(
    "llama2",
    "70b",
    80,
    8192,
    28672,
    64,
    8,
    4096,
    script="tests/fixtures/scripts/pretrain_llama2_70b_4k_ptd.sh",
)
TINY = TinkerShape(
    "llama", "tiny", 8, 256, 688, 8, 4, 512, script="examples/pretrain_llama_tiny_ptd.sh"
)
"""The shape of examples/pretrain_llama_tiny_ptd.sh (GQA with 4 groups: tp up to 4)."""


def _us(flops: float) -> float:
    return flops / (ACHIEVED_TFLOPS * 1e6)


def _collective_us(tp: int, nbytes: float) -> float:
    """A ring all-reduce (or all-gather + reduce-scatter) of nbytes over tp ranks."""
    return 0.0 if tp == 1 else 2 * (tp - 1) / tp * nbytes / (TP_LINK_GBS * 1e3) + 10.0


def _layer(shape: TinkerShape, tp: int, sp: int, mbs: int) -> list[float]:
    tokens, h = shape.seq_length * mbs, shape.hidden_size
    fwd_flops = (
        2 * tokens * shape.layer_params() / tp + 2 * tokens * shape.seq_length * h / tp
    )  # causal attention
    tp_us = 2 * _collective_us(tp, 2 * tokens * h)  # two exchanges per layer, each way
    edge_mib = 2 * tokens * h / (tp if sp else 1) / MIB
    act = tokens * h * (34 / tp if sp else 10 + 24 / tp) / MIB
    weights = shape.layer_params() / tp * 2 / MIB
    fwd_reserved = 2 * tokens * shape.ffn_hidden_size / tp / MIB
    return [
        _us(fwd_flops) + tp_us,
        _us(2 * fwd_flops) + tp_us,
        edge_mib,
        edge_mib,
        weights,
        act,
        fwd_reserved,
        1.5 * fwd_reserved,
    ]


def _edges(shape: TinkerShape, tp: int, sp: int, mbs: int) -> dict[str, list[float]]:
    tokens, h, vocab = shape.seq_length * mbs, shape.hidden_size, shape.vocab_size
    edge_mib = 2 * tokens * h / (tp if sp else 1) / MIB
    head_flops = 2 * tokens * h * vocab / tp
    logits_mib = 4 * tokens * vocab / tp / MIB
    table_mib = vocab / tp * h * 2 / MIB
    ids_mib = 2 * 8 * tokens / MIB  # input_ids and position_ids, int64 (masks are not counted)
    return {
        "embedding": [
            8.0 * mbs + _collective_us(tp, 2 * tokens * h),
            15.0 * mbs,
            ids_mib,
            edge_mib,
            table_mib,
            edge_mib,
            edge_mib,
            edge_mib,
        ],
        "final_norm": [
            4.0 * mbs,
            8.0 * mbs,
            edge_mib,
            edge_mib,
            h * 2 / MIB,
            edge_mib,
            0.0,
            edge_mib,
        ],
        "post_process": [
            _us(head_flops) + _collective_us(tp, 2 * tokens * h),
            _us(2 * head_flops),
            edge_mib,
            0.0,
            table_mib,
            logits_mib,
            logits_mib,
            2 * logits_mib,
        ],
    }


def block_rows(
    shape: TinkerShape, tp: int, sp: int, mbs: int, oom: bool = False
) -> dict[str, list[float]]:
    """The eight numbers of each block of one group, in profiled_data.csv's column order."""
    rows = {"transformer_block": _layer(shape, tp, sp, mbs), **_edges(shape, tp, sp, mbs)}
    if oom:  # Tinker keeps the sizes it inferred and writes EXCEPTIONAL_VALUE for what it measures
        rows = {
            name: [EXCEPTIONAL_VALUE, EXCEPTIONAL_VALUE, r[2], r[3], r[4]] + [EXCEPTIONAL_VALUE] * 3
            for name, r in rows.items()
        }
    return {name: rows[name] for name in BLOCKS}


def profile_space(
    shape: TinkerShape, max_npu: int = 8, mbs: tuple[int, ...] = (1, 2, 4)
) -> list[tuple[int, int, int]]:
    """Tinker's (tp, sp, mbs) points: tp a power of two dividing the heads and groups, sp only with tp > 1."""
    tps = [
        t
        for t in (1, 2, 4, 8, 16)
        if t <= max_npu and shape.num_query_groups % t == 0 and shape.num_attention_heads % t == 0
    ]
    return [(tp, sp, b) for tp in tps for sp in ((0,) if tp == 1 else (0, 1)) for b in mbs]


def write_tinker_folder(
    root: Path,
    shape: TinkerShape,
    *,
    max_npu: int = 8,
    mbs: tuple[int, ...] = (1, 2, 4),
    oom: tuple[tuple[int, int, int], ...] = (),
    stamp: str = "250101-120000",
    model_info_layers: int | None = None,
    version: dict | None = None,
) -> Path:
    """Write `root/profiled-data-<name>-<size>-<stamp>/` and return it.

    `oom`: (tp, sp, mbs) groups written as Tinker writes an out-of-memory run. `model_info_layers`:
    the num_layers Tinker recorded (1 when it profiled a shrunk script). `version`: extra or
    replaced VERSION keys (None values remove a key).
    """
    folder = Path(root) / f"profiled-data-{shape.model_name}-{shape.model_size}-{stamp}"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "profiled_data.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "config",
                "block_name",
                "forward-compute",
                "backward_compute",
                "input_size",
                "output_size",
                "weights",
                "activations",
                "fwd_reserved",
                "bwd_reserved",
            ]
        )
        for tp, sp, b in profile_space(shape, max_npu, mbs):
            config = f"{shape.prefix}_tp{tp}_sp{sp}_ep1_mbs{b}_algo0"
            for name, values in block_rows(shape, tp, sp, b, oom=(tp, sp, b) in oom).items():
                writer.writerow([config, name] + [f"{float(v):.3f}" for v in values])
            writer.writerow([])
    layers = shape.num_layers if model_info_layers is None else model_info_layers
    info = {"seq_length": shape.seq_length, "fp16": False, "bf16": True, "num_layers": layers}
    (folder / f"model_info_seq{shape.seq_length}.json").write_text(
        json.dumps(info, indent=4), encoding="utf-8"
    )
    task = {
        "version_profiler": "TinkerProfiler-1.3.3",
        "task_time": "2025-01-01 12:00:00",
        "model_name": shape.model_name,
        "model_size": shape.model_size,
        "pretrain_script_path": f"./scripts/pretrain_{shape.prefix}.sh",
        "version": "1.1",
        "max_npu": max_npu,
    }
    task.update(version or {})
    task = {k: v for k, v in task.items() if v is not None}
    (folder / "VERSION_TinkerProfiler-1.3.3.json").write_text(
        json.dumps(task, indent=4), encoding="utf-8"
    )
    with open(folder / "p2p_intra_node.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(P2P_SIZES_MB)
        writer.writerow(P2P_BANDWIDTHS_GBS)
    return folder
