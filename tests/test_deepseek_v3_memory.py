"""DeepSeek-V3 671B's MindSpeed-LLM DualPipeV scripts, memory as written (issue 29): where the
experts of a rank come from and what they weigh.

* A3 (`--moe-tp-extend-ep`, tp 2 x ep 16): MindSpeed spreads the 256 experts over tp x ep = 32
  ranks (megatron-moe-tp-extend-ep.md), 8 whole experts a rank; fits the device.
* A2 at 6209b29 (tp 4, ep 8, `--expert-tensor-parallel-size 1`, no tp-extend-ep): Megatron-Core's
  expert grid gives 256 / 8 = 32 experts a rank; with 8 MoE layers a rank, their bf16 weights and
  fp32 main gradients alone (MindSpeed's `--gemm-gradient-accumulation-fusion` accumulates into
  fp32: npu_groupmatmul_add.md) exceed the 910B's 64 GiB of HBM, so the script cannot run as
  written; its later form (ep 32, `pretrain_deepseek3_671b_4k_ep32_dualpipev_ptd.sh`) fits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from script_support import FIXTURES

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.framework_memory import accelerator_of, launch_budget_mb
from tinker_opt.hardware import load_hardware
from tinker_opt.profile.analytic import analytic_profile
from tinker_opt.profile.space import SpaceLimits
from tinker_opt.profile.store import load_profiled_data
from tinker_opt.script.noop_layers import computing_layer_strategy
from tinker_opt.script.reader import read_script
from tinker_opt.specs import ClusterSpec
from tinker_opt.verbs import job_options

A2 = "pretrain_deepseek3_671b_4k_dualpipev_ptd.sh"
A2_EP32 = "pretrain_deepseek3_671b_4k_ep32_dualpipev_ptd.sh"
A3 = "pretrain_deepseek3_671b_4k_A3_dualpipev_ptd.sh"
HARDWARE = {A2: "910b", A2_EP32: "910b", A3: "atlas-a3"}


def _evaluate(name: str, tmp: Path):
    """The script's own strategy on an analytic profile of its own shapes; with the limit `simulate`
    holds it to (the device less what the framework keeps)."""
    info = read_script(FIXTURES / name)
    s = info.train.strategy
    hardware = load_hardware(HARDWARE[name])
    limits = SpaceLimits(
        max_npu=s.tp,
        max_mbs=s.mbs,
        prof_tp=(s.tp,),
        prof_sp=(int(s.sp),),
        prof_cp=(s.cp,),
        prof_ep=(s.ep,),
        prof_etp=(s.expert_tp,),
    )
    profiled = load_profiled_data(analytic_profile(info.model, hardware, tmp, limits=limits))
    own = computing_layer_strategy(s, info.model.noop_layers, info.num_layers_in_script)
    per_node = info.train.nproc_per_node
    limit = launch_budget_mb(hardware.memory_gb * 1024, accelerator_of(hardware.name, "analytic"))
    cluster = ClusterSpec(
        num_nodes=own.world_size // per_node, devices_per_node=per_node, memory_limit_mb=limit
    )
    cost = CostModel.from_profile(
        profiled,
        info.model,
        cluster,
        info.train.global_batch_size,
        hardware=hardware,
        job=job_options(info),
    )
    return own, cost.evaluate(own), limit, hardware.memory_gb * 1024


def test_tp_extend_ep_reads_as_tp_times_ep_expert_ranks():
    """A3: --expert-model-parallel-size 16 with --moe-tp-extend-ep at tp 2 is 32 expert ranks."""
    s = read_script(FIXTURES / A3).train.strategy
    assert (s.tp, s.ep, s.expert_tp) == (2, 32, 1)


@pytest.mark.parametrize("name", [A2_EP32, A3])
def test_eight_experts_a_rank_fit_the_device(name, tmp_path):
    """Both 32-expert-rank forms hold 8 experts a MoE layer on each rank and fit as written."""
    own, evaluation, limit, _ = _evaluate(name, tmp_path)
    assert 256 // own.ep == 8
    assert evaluation.peak_memory_mb < limit


def test_a2_at_6209b29_holds_32_experts_a_rank_beyond_the_hbm(tmp_path):
    """Ranks 1-7 hold 8 MoE layers of 32 experts (3 x 7168 x 2048 each): 11.3 B expert
    parameters, 64.5 GiB of bf16 weights and fp32 gradients; with the layers' dense parameters
    (MLA, shared expert, router at tp 4) the two pass the 64 GiB of HBM before any optimizer
    state or activation."""
    own, evaluation, limit, device_mb = _evaluate(A2, tmp_path)
    assert 256 // own.ep == 32
    middle = evaluation.stages[1]
    expert_mb = 6 * 8 * 32 * 3 * 7168 * 2048 / 2**20
    assert expert_mb < middle.weights_mb + middle.gradients_mb < expert_mb * 1.1
    assert middle.weights_mb + middle.gradients_mb > device_mb
    assert evaluation.peak_memory_mb > limit
