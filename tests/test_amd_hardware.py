"""AMD Instinct MI300X / MI325X / MI355X descriptions and the device `inspect` names (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinker_opt.comm_cost import collective_time_us
from tinker_opt.hardware import load_hardware
from tinker_opt.script.device_hint import device_hint
from tinker_opt.verbs.scripts import run_inspect

ROCM_SCRIPT = """#!/bin/bash
export GPU_MAX_HW_QUEUES=${GPU_MAX_HW_QUEUES:-2}
export HSA_NO_SCRATCH_RECLAIM=1
export RCCL_MSCCL_ENABLE=0
export NCCL_PROTO=Simple
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\
    --tensor-model-parallel-size 8 --num-layers 32 --hidden-size 4096 \\
    --ffn-hidden-size 14336 --num-attention-heads 32 --seq-length 2048 \\
    --max-position-embeddings 2048 --micro-batch-size 2 --global-batch-size 16 \\
    --bf16 --use-flash-attn --swiglu --normalization RMSNorm
"""
"""A launch in the style of ROCm/Megatron-LM examples/llama/train_llama3.sh (its ROCm variables,
written here, not copied)."""


@pytest.mark.parametrize(
    ("name", "memory_gb", "bf16", "fp8", "bandwidth_gbs"),
    [
        ("mi300x", 192, 1307.4, 2614.9, 5300),
        ("mi325x", 256, 1307.4, 2614.9, 6000),
        ("mi355x", 288, 2516.6, 5033.2, 8000),
    ],
)
def test_amd_peaks_memory_and_network(name, memory_gb, bf16, fp8, bandwidth_gbs) -> None:
    """Peaks and HBM as the ROCm tables state them; 8 GPUs in a full Infinity Fabric mesh (seven
    links), one NIC per GPU, RCCL."""
    hardware = load_hardware(name)
    assert hardware.memory_gb == memory_gb and hardware.memory_bandwidth_gbs == bandwidth_gbs
    assert (hardware.peak_tflops["bf16"], hardware.peak_tflops["fp8"]) == (bf16, fp8)
    assert hardware.intra_node.mesh_links == 7 and hardware.devices_per_node == 8
    assert hardware.nics_per_device == 1 and hardware.collectives == "rccl"
    assert hardware.has_fp8
    notes = " ".join(hardware.efficiency.notes) + " ".join(hardware.assumptions)
    assert "ASSUMPTION" in notes


def test_a_pair_of_gpus_has_one_of_seven_links() -> None:
    """In the full mesh, a tp-2 pair talks over one link (1/7 of the node's bandwidth), eight
    GPUs over all seven: an all-reduce of 8 takes less time per byte than one of 2."""
    link = load_hardware("mi300x").intra_node
    assert link.group_bandwidth_gbs(2) == pytest.approx(link.bandwidth_gbs / 7)
    assert link.group_bandwidth_gbs(8) == link.bandwidth_gbs
    size = 256 * 2**20
    pair = collective_time_us("all_reduce", 2, size, link.group_bandwidth_gbs(2), link.latency_us)
    node = collective_time_us("all_reduce", 8, size, link.group_bandwidth_gbs(8), link.latency_us)
    assert node < pair


def test_mi355x_is_faster_than_mi300x_per_flop() -> None:
    """CDNA 4 doubles the per-CU matrix rate: MI355X's BF16 and FP8 peaks are about 1.9x MI300X's."""
    ratio = (
        load_hardware("mi355x").peak_tflops["bf16"] / load_hardware("mi300x").peak_tflops["bf16"]
    )
    assert 1.8 < ratio < 2.0


def test_inspect_names_the_rocm_device(tmp_path: Path) -> None:
    """A script with ROCm's environment: inspect names AMD Instinct and the three descriptions."""
    path = tmp_path / "train_llama3.sh"
    path.write_text(ROCM_SCRIPT, encoding="utf-8")
    data, _ = run_inspect(path)
    assert data["device"]["family"] == "AMD Instinct (ROCm)"
    assert data["device"]["hardware"] == "mi300x, mi325x, mi355x"
    assert "HSA_NO_SCRATCH_RECLAIM" in data["device"]["markers"]


def test_a_named_model_comes_first_and_nccl_alone_proves_nothing() -> None:
    """`MI355X` in the script puts mi355x first; NCCL variables and --use-flash-attn alone name
    no device; MindSpeed's Ascend variables name the NPUs."""
    assert device_hint(ROCM_SCRIPT + "# runs on MI355X\n").descriptions[0] == "mi355x"
    plain = "export NCCL_IB_HCA=mlx5\ntorchrun pretrain_gpt.py --use-flash-attn\n"
    assert device_hint(plain).family is None
    ascend = (
        "source /usr/local/Ascend/ascend-toolkit/set_env.sh\nexport HCCL_CONNECT_TIMEOUT=1200\n"
    )
    assert device_hint(ascend).descriptions == ("910b", "atlas-a3")
