"""CP-SAT on a realistic profile: the analytic profile of a real launch script, where the memory
forces full recompute with r > 1 (the case the recompute-count bounds make easy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.hardware import load_hardware
from tinker_opt.profile.store import load_profiled_data
from tinker_opt.solve.search import search
from tinker_opt.solve.space import SearchSpace
from tinker_opt.specs import ClusterSpec

SCRIPT = Path(__file__).parent / "fixtures" / "scripts" / "pretrain_llama2_7b_ptd.sh"
SPACE = SearchSpace(max_mbs=2)


@pytest.fixture(scope="module")
def cost_model(tmp_path_factory):
    """LLaMA-2-7B on one A100-80GB node with 20 GB per device (analytic profile, tp <= 8, mbs <= 2)."""
    from tinker_opt.profile.analytic import analytic_profile
    from tinker_opt.profile.space import SpaceLimits
    from tinker_opt.script.reader import read_script

    info = read_script(SCRIPT)
    hardware = load_hardware("a100-80gb")
    folder = analytic_profile(
        info.model,
        hardware,
        tmp_path_factory.mktemp("profile") / "llama2-7b",
        limits=SpaceLimits(max_npu=8, max_mbs=2),
    )
    profiled = load_profiled_data(folder)
    cluster = ClusterSpec(num_nodes=1, devices_per_node=8, memory_limit_mb=20000)
    return CostModel.from_profile(profiled, profiled.model, cluster, 256, hardware=hardware)


@pytest.mark.parametrize("prune", [True, False])
def test_cpsat_proves_the_enumeration_optimum(cost_model, prune):
    """CP-SAT (with and without bound pruning) proves the optimum that enumeration finds."""
    enum = search(cost_model, solver="enum", cpus=1, top_k=1, space=SPACE)
    cpsat = search(
        cost_model, solver="cpsat", cpus=1, top_k=1, space=SPACE, time_limit_s=60, prune=prune
    )
    assert cpsat.status == "optimal" and cpsat.gap == 0
    assert cpsat.best.time_ns_x_vpp == enum.best.time_ns_x_vpp
    assert cpsat.best.fits
