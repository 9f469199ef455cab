"""A Megatron-LM script never yields a layer list it cannot write: the split solvers keep to the
framework's layer form (rules.LAYER_FORMS), so every ranked row becomes a tuned script."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_support import cluster, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.expressible import expressible_strategy, search_space_for
from tinker_opt.rules import layer_form_message
from tinker_opt.script import versions
from tinker_opt.script.reader import read_script
from tinker_opt.solve.search import search

GPT3 = Path(__file__).parent / "fixtures" / "scripts" / "train_gpt3_175b_distributed.sh"


def _megatron_script(tmp_path: Path, num_layers: int):
    """The GPT-3 Megatron-LM script with another layer count (one that pp rarely divides)."""
    path = tmp_path / GPT3.name
    path.write_text(
        GPT3.read_text(encoding="utf-8").replace("--num-layers 96", f"--num-layers {num_layers}"),
        encoding="utf-8",
    )
    return read_script(path)


@pytest.mark.parametrize("num_layers,num_nodes", [(30, 4), (30, 8), (30, 16), (45, 8), (45, 16)])
def test_megatron_search_yields_only_writable_layer_lists(tmp_path, num_layers, num_nodes):
    """Across cluster sizes every top-k strategy of a Megatron-LM search has equal middle stages
    and the writer writes it (the failure was an unequal middle found only after the solve)."""
    info = _megatron_script(tmp_path, num_layers)
    vr = versions.resolve(None, info.text, info.train.framework.flavour)
    assert vr.family == versions.MEGATRON
    profile = synthetic_profile(info.model, tps=(1, 2, 4, 8), cps=(1,), eps=(1,), mbss=(1, 2))
    cost_model = CostModel.from_profile(profile, info.model, cluster(num_nodes, 8, 57000), 512)
    result = search(
        cost_model,
        solver="cpsat",
        cpus=1,
        top_k=10,
        space=search_space_for(info, vr),
        time_limit_s=60,
    )
    uneven = 0
    for evaluation in result.top:
        layers = evaluation.strategy.stage_layers(num_layers)
        assert layer_form_message(layers, "first_last") is None, layers
        uneven += len(set(layers)) > 1
        written = expressible_strategy(evaluation.strategy, info, vr, world=num_nodes * 8)
        text = apply_strategy(info.text, written, nnodes=num_nodes, nproc_per_node=8).text
        assert "--num-layer-list" not in text
    if num_layers == 30:
        assert uneven, "30 layers over 8 or 16 stages: some ranked row uses the first/last counts"


def test_simulate_warns_when_the_framework_cannot_write_the_split(tmp_path):
    """simulate still evaluates an unequal middle split on a Megatron-LM script, with the warning."""
    from tinker_opt.config import SimulateSettings
    from tinker_opt.strategy import Strategy
    from tinker_opt.verbs.simulate import _layer_form_warning

    info = _megatron_script(tmp_path, 30)
    strategy = Strategy(tp=8, pp=4, dp=1, num_layer_list=(7, 7, 8, 8))
    (warning,) = _layer_form_warning(strategy, info, SimulateSettings())
    assert "unequal middle stages" in warning
    assert (
        _layer_form_warning(strategy.replace(num_layer_list=(6, 8, 8, 8)), info, SimulateSettings())
        == []
    )


def test_a_row_the_writer_refuses_is_reported_not_fatal(tmp_path):
    """If a ranked row still cannot be written, the writer logs it, adds a warning and returns no
    script, so the finished search keeps its results folder."""
    from tinker_opt.emit.search_folder import script_writer as _script_writer
    from tinker_opt.specs import ClusterSpec
    from tinker_opt.strategy import Strategy
    from tinker_opt.verbs import RunLog

    info = _megatron_script(tmp_path, 30)
    log, warnings = RunLog(), []
    write = _script_writer(
        info,
        ClusterSpec(num_nodes=4, devices_per_node=8, memory_limit_mb=57000),
        None,
        log,
        warnings,
        256,
    )
    bad = Strategy(tp=8, pp=4, dp=1, num_layer_list=(7, 7, 8, 8)).to_dict()
    assert write(3, bad, ["# header"], "rank3.sh") is None
    assert warnings and warnings[0].startswith("rank 3: no tuned script written:")
    assert "unequal middle stages" in warnings[0] and log.lines[-1].endswith(warnings[0])
    assert "--decoder-first-pipeline-num-layers 6" in write(
        1, {**bad, "num_layer_list": [6, 8, 8, 8]}, [], "rank1.sh"
    )
