"""The cost model on a Tinker folder: its block times are taken as Tinker measured them (TP / SP
collectives inside), and a Tinker pick's modelled time differs from Tinker's own prediction only
by the terms Tinker leaves out (reference/tinker-compat.md, "Its model, briefly")."""

from __future__ import annotations

import csv

import pytest
from cli_support import ROOT
from tinker_folder import LLAMA2_7B, LLAMA2_70B, write_tinker_folder

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.simulate import strategy_from_flags
from tinker_opt.profile.store import load_profiled_data
from tinker_opt.script.reader import read_script
from tinker_opt.specs import ClusterSpec

BLOCK_ORDER = ("embedding", "transformer_block", "final_norm", "post_process")


@pytest.fixture(scope="module", params=[LLAMA2_7B, LLAMA2_70B], ids=["7b", "70b"])
def tinker(request, tmp_path_factory):
    shape = request.param
    folder = write_tinker_folder(tmp_path_factory.mktemp(shape.model_size), shape)
    return shape, folder, read_script(ROOT / shape.script).model


def _cost_model(folder, model, nodes=1, gbs=64, memory_mb=10**7):
    cluster = ClusterSpec(num_nodes=nodes, devices_per_node=8, memory_limit_mb=memory_mb)
    return CostModel.from_profile(load_profiled_data(folder), model, cluster, gbs)


def _tinker_rows(folder, tp: int, sp: int, mbs: int) -> dict[str, tuple[float, float]]:
    """(forward, backward) microseconds per block, read straight from profiled_data.csv."""
    with open(folder / "profiled_data.csv", newline="", encoding="utf-8") as handle:
        rows = [
            r
            for r in csv.reader(handle)
            if r and r[0].endswith(f"_tp{tp}_sp{sp}_ep1_mbs{mbs}_algo0")
        ]
    return {r[1]: (float(r[2]), float(r[3])) for r in rows}


def _tinker_prediction_ms(
    folder, num_layers: int, tp: int, sp: int, mbs: int, num_micro: int, recompute: bool
) -> float:
    """Tinker's iteration time of a pp = 1 pick: per block fwd (1 + recompute) + bwd, the stage the
    sum of its blocks (no send / receive with one stage), m micro-batches (1F1B: sum + (m-1) max)."""
    rows = _tinker_rows(folder, tp, sp, mbs)
    stage_us = 0.0
    for block in BLOCK_ORDER:
        fwd, bwd = rows[block]
        count = num_layers if block == "transformer_block" else 1
        stage_us += count * (fwd * (1 + (recompute and block == "transformer_block")) + bwd)
    return num_micro * stage_us / 1e3


@pytest.mark.parametrize("tp,sp", [(1, 0), (2, 1), (4, 0), (8, 1)])
def test_compute_reproduces_the_folder_block_times_with_no_tp_term(tinker, tp, sp):
    """For a fully profiled strategy the compute term is the folder's own block times and no TP
    collective is added (they are inside Tinker's times); the breakdown says so."""
    _shape, folder, model = tinker
    cost_model = _cost_model(folder, model)
    strategy = strategy_from_flags(
        num_devices=8, num_layers=model.num_layers, tp=tp, sp=bool(sp), mbs=1
    )
    evaluation = cost_model.evaluate(strategy)
    m = 64 // strategy.dp
    rows = _tinker_rows(folder, tp, sp, 1)
    per_micro_us = sum(
        sum(rows[b]) * (model.num_layers if b == "transformer_block" else 1) for b in BLOCK_ORDER
    )
    assert evaluation.time_breakdown_ms["compute_ms"] == pytest.approx(
        m * per_micro_us / 1e3, rel=1e-12
    )
    assert evaluation.time_breakdown_ms["comm_ms"] == 0.0
    assert all(stage.comm_ms == 0.0 for stage in evaluation.stages)
    assert evaluation.in_block_times == ("tp_comm", "ep_comm")


def test_recompute_forward_adds_no_tp_term(tinker):
    """Full recompute re-runs the layer's forward as Tinker measured it (its collectives inside)."""
    _shape, folder, model = tinker
    strategy = strategy_from_flags(
        num_devices=8, num_layers=model.num_layers, tp=8, sp=True, mbs=1, recompute=1
    )
    evaluation = _cost_model(folder, model).evaluate(strategy)
    fwd = _tinker_rows(folder, 8, 1, 1)["transformer_block"][0]
    assert evaluation.time_breakdown_ms["recompute_ms"] == pytest.approx(
        (64 // strategy.dp) * model.num_layers * fwd / 1e3, rel=1e-12
    )


@pytest.mark.parametrize(
    "tp,sp,mbs,recompute", [(1, 0, 1, False), (2, 1, 2, False), (4, 1, 1, True), (8, 0, 4, True)]
)
def test_a_tinker_pick_differs_from_tinker_only_by_the_terms_it_leaves_out(
    tinker, tp, sp, mbs, recompute
):
    """Single node, pp = 1: modelled time - Tinker's prediction = data-parallel sync + optimizer step,
    each a term of the breakdown (no bubble and no send / receive with one stage)."""
    _shape, folder, model = tinker
    cost_model = _cost_model(folder, model)
    strategy = strategy_from_flags(
        num_devices=8,
        num_layers=model.num_layers,
        tp=tp,
        sp=bool(sp),
        mbs=mbs,
        recompute=int(recompute),
    )
    evaluation = cost_model.evaluate(strategy)
    m = 64 // (mbs * strategy.dp)
    tinker_ms = _tinker_prediction_ms(folder, model.num_layers, tp, sp, mbs, m, recompute)
    parts = evaluation.time_breakdown_ms
    assert parts["bubble_ms"] == 0.0 and parts["comm_ms"] == 0.0
    left_out = parts["dp_sync_ms"] + parts["optimizer_ms"]
    assert evaluation.iteration_time_ms - tinker_ms == pytest.approx(left_out, rel=1e-9, abs=1e-9)
    assert parts["optimizer_ms"] > 0 and (strategy.dp == 1 or parts["dp_sync_ms"] > 0)


def test_attention_mask_is_charged_once_per_stage(tinker):
    """Tinker's seq^2-byte mask is in every stage's memory once, not once per layer."""
    shape, folder, model = tinker
    strategy = strategy_from_flags(num_devices=8, num_layers=model.num_layers, tp=8, pp=1, mbs=1)
    stage = _cost_model(folder, model).evaluate(strategy).stages[0]
    assert stage.attention_mask_mb == pytest.approx(shape.seq_length**2 / 2**20)


def test_with_pipeline_stages_the_difference_is_the_send_receive_and_the_tail(tinker):
    """Single node, pp = 2 with a Tinker-style uneven list: modelled time - Tinker's block formula
    (sum of stages + (m - 1) x the slowest, before Tinker adds its table's send / receive) = the
    pipeline send / receive per stage (p + m - 1 times, the stage comm term) + dp sync + optimizer."""
    _shape, folder, model = tinker
    L = model.num_layers
    layers = (L // 2 - 1, L // 2 + 1)
    strategy = strategy_from_flags(
        num_devices=8, num_layers=L, tp=4, pp=2, sp=True, mbs=1, num_layer_list=layers
    )
    evaluation = _cost_model(folder, model).evaluate(strategy)
    m = 64 // strategy.dp
    rows = _tinker_rows(folder, 4, 1, 1)
    block = {name: sum(rows[name]) for name in BLOCK_ORDER}
    stages_us = [
        block["embedding"] + layers[0] * block["transformer_block"],
        layers[1] * block["transformer_block"] + block["final_norm"] + block["post_process"],
    ]
    tinker_blocks_ms = (sum(stages_us) + (m - 1) * max(stages_us)) / 1e3
    p2p_ms = evaluation.stages[0].comm_ms
    assert p2p_ms > 0 and evaluation.stages[1].comm_ms == p2p_ms
    parts = evaluation.time_breakdown_ms
    expected = (2 + m - 1) * p2p_ms + parts["dp_sync_ms"] + parts["optimizer_ms"]
    assert evaluation.iteration_time_ms - tinker_blocks_ms == pytest.approx(expected, rel=1e-9)
