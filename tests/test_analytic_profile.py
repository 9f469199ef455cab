"""The analytic device: the profiled-data folder it writes and its equality with a measured profile."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from tests.profile_support import gpt_model, llama_model
from tinker_opt.hardware import comm_table, load_hardware
from tinker_opt.profile.analytic import DEVICE_PREFIX, analytic_profile, block_row, trace_block
from tinker_opt.profile.runner import MeasureSettings, run_profile
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.space import SpaceLimits
from tinker_opt.profile.store import BLOCK_COLUMNS, load_profiled_data

MEASURED = dict(device="cpu", max_npu=2, max_mbs=2, comm="skip", warmup=1, repeats=5)
BYTE_COLUMNS = [
    "param_count",
    "expert_param_count",
    "weight_bytes",
    "input_bytes",
    "output_bytes",
    "activation_bytes",
    "selective_activation_bytes",
    "transient_bytes",
]


def small_gpt():
    return gpt_model(seq=32, hidden=32, heads=4, vocab=256)


def small_llama():
    return llama_model(seq=32, hidden=32, heads=4, groups=2, ffn=64, vocab=256)


@pytest.fixture(scope="module", params=[small_gpt, small_llama], ids=["gpt", "llama"])
def both(request, tmp_path_factory):
    """A measured CPU profile and an analytic profile of the same model and profile space."""
    model = request.param()
    settings = MeasureSettings(**MEASURED)
    measured = run_profile(model, settings, tmp_path_factory.mktemp("measured"))
    analytic = analytic_profile(
        model,
        load_hardware("a100-80gb"),
        tmp_path_factory.mktemp("analytic"),
        limits=settings.limits(None),
    )
    return load_profiled_data(measured), load_profiled_data(analytic)


def test_bytes_equal_the_measured_cpu_profile(both):
    """Every byte and parameter count of every row equals the measured CPU profile's exactly."""
    measured, analytic = both
    key = ["block", "tp", "sp", "cp", "ep", "etp", "mbs"]
    joined = measured.blocks.merge(analytic.blocks, on=key, suffixes=("_cpu", "_analytic"))
    assert len(joined) == len(measured.blocks) == len(analytic.blocks)
    for column in BYTE_COLUMNS:
        assert (joined[f"{column}_cpu"] == joined[f"{column}_analytic"]).all(), column


def test_folder_loads_with_every_row_ok(both):
    """The analytic folder is a valid profiled-data folder with positive times on every row."""
    _, analytic = both
    assert list(analytic.blocks.columns) == list(BLOCK_COLUMNS)
    assert (analytic.blocks["status"] == "ok").all()
    assert (analytic.blocks["fwd_us"] > 0).all() and (analytic.blocks["bwd_us"] > 0).all()


def test_meta_names_the_analytic_device_and_description(both):
    """meta.json says analytic:<hardware> and embeds the description that timed the rows."""
    _, analytic = both
    assert analytic.meta.device["name"] == DEVICE_PREFIX + load_hardware("a100-80gb").name
    assert analytic.meta.device["kind"] == "analytic"
    assert analytic.meta.hardware["memory_bandwidth_gbs"] == 2039


def test_comm_csv_is_the_description_table(both):
    """comm.csv holds the hardware description's collective table."""
    _, analytic = both
    expected = comm_table(load_hardware("a100-80gb"), max_group_size=64)
    assert len(analytic.comm) == len(expected)
    assert analytic.comm["time_us"].sum() == pytest.approx(expected["time_us"].sum(), rel=1e-6)


def test_big_layer_traces_without_allocating():
    """A 175B-sized layer shard traces on fake tensors (nothing of its 450 MB of weights is allocated)."""
    model = gpt_model(seq=2048, hidden=12288, heads=96, vocab=51200, layers=96)
    trace = trace_block(model, "layer", Shape(tp=8, sp=True, mbs=1))
    # Korthikanti et al. 2022: tensor + sequence parallel keeps s b h (34 + 5 a s / h) / t bytes.
    sbh = 2048 * 12288
    assert trace.memory.activation_bytes == pytest.approx(
        sbh * (34 + 5 * 96 * 2048 / 12288) / 8, rel=0.01
    )
    assert trace.memory.weight_bytes == 2 * trace.memory.param_count


def test_time_scales_with_the_peak():
    """Doubling every peak rate at least nearly halves a compute-heavy block's time."""
    model = gpt_model(seq=1024, hidden=2048, heads=16)
    trace = trace_block(model, "layer", Shape(tp=1, mbs=2))
    hardware = load_hardware("a100-80gb")
    fast = hardware.from_dict(
        {
            **hardware.to_dict(),
            "peak_tflops": {k: 2 * v for k, v in hardware.peak_tflops.items()},
            "memory_bandwidth_gbs": 2 * hardware.memory_bandwidth_gbs,
        }
    )
    slow_row, fast_row = block_row(trace, hardware), block_row(trace, fast)
    assert fast_row["fwd_us"] == pytest.approx(slow_row["fwd_us"] / 2, rel=0.01)


def test_selective_recompute_costs_the_core_attention():
    """Selective recompute time is positive for layers and zero for the other blocks."""
    model = small_gpt()
    hardware = load_hardware("h100-80gb")
    layer = block_row(trace_block(model, "layer", Shape(tp=2, sp=True, mbs=1)), hardware)
    head = block_row(trace_block(model, "head", Shape(tp=2, sp=True, mbs=1)), hardware)
    assert 0 < layer["selective_recompute_us"] < layer["fwd_us"]
    assert head["selective_recompute_us"] == 0


def test_profile_space_follows_the_limits(tmp_path):
    """The rows are the measured profile's space for the same limits."""
    limits = SpaceLimits(max_npu=2, max_mbs=1)
    folder = analytic_profile(small_llama(), load_hardware("910b"), tmp_path, limits=limits)
    blocks = pd.read_csv(folder / "blocks.csv")
    assert sorted(set(blocks["tp"])) == [1, 2] and set(blocks["mbs"]) == {1}
    assert set(blocks["block"]) == {"embedding", "layer", "final_norm", "head"}


def test_progress_reports_every_row(tmp_path):
    """progress(i, n, label) is called once per row, ending at n."""
    calls = []
    analytic_profile(
        small_gpt(),
        load_hardware("a100-40gb"),
        tmp_path,
        limits=SpaceLimits(max_npu=1, max_mbs=1),
        progress=lambda i, n, label: calls.append((i, n, label)),
    )
    assert [c[0] for c in calls] == list(range(1, len(calls) + 1)) and calls[-1][1] == len(
        calls
    ) == 4


def test_tp_across_nodes_is_profiled_with_inter_node_comm(tmp_path):
    """tp 8 on nodes of 4 (prof_tp a multiple of max_npu): tp-8 rows in blocks.csv, and comm.csv
    has inter-node rows for groups of 8 but no intra-node row wider than a node."""
    model = gpt_model(seq=32, hidden=64, heads=8, vocab=256)
    hardware = dataclasses.replace(load_hardware("910b"), devices_per_node=4)
    folder = analytic_profile(
        model, hardware, tmp_path, limits=SpaceLimits(max_npu=4, max_mbs=1, prof_tp=(4, 8))
    )
    data = load_profiled_data(folder)
    assert sorted(set(data.blocks["tp"])) == [4, 8]
    comm = data.comm
    assert not comm[(comm["scope"] == "inter_node") & (comm["group_size"] == 8)].empty
    assert comm[comm["scope"] == "intra_node"]["group_size"].max() == 4
