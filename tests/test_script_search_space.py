"""The search space follows what the script's framework version can express (expressible.py)."""

from pathlib import Path

import pytest

from tinker_opt.expressible import search_space_for
from tinker_opt.script import versions
from tinker_opt.script.reader import read_script

SCRIPTS = Path(__file__).parent / "fixtures" / "scripts"


def _space(name: str, version: str | None = None):
    info = read_script(SCRIPTS / name)
    return search_space_for(
        info, versions.resolve(version, info.text, info.train.framework.flavour)
    )


def test_pre_modellink_has_no_virtual_pipeline():
    """Pre-1.0 ModelLink lacks --num-layers-per-virtual-pipeline-stage: no vpp in the search."""
    assert _space("pretrain_llama_7b_zero_8p.sh").allow_vpp is False


def test_old_mindspeed_keeps_etp_at_tp():
    """Before 2.2.0 there is no --expert-tensor-parallel-size: etp follows tp."""
    assert _space("pretrain_mixtral_8x7B_rc1_ptd.sh").etp_follows_tp is True
    assert _space("pretrain_deepseek3_671b_4k_ptd.sh").etp_follows_tp is False


def test_megatron_runs_ring_attention_and_no_free_layer_list():
    """Megatron-LM: cp only as megatron_cp_algo, and only first/last-stage layer counts."""
    space = _space("train_gpt3_175b_distributed.sh")
    assert space.cp_algos == ("megatron_cp_algo",)
    assert space.layer_form == "first_last"


@pytest.mark.parametrize(
    "name,form", [("pretrain_llama2_7b_ptd.sh", "free"), ("pretrain_llama_7b_zero_8p.sh", "even")]
)
def test_layer_form_follows_the_framework(name, form):
    """MindSpeed-LLM with --num-layer-list: any list; pre-1.0 ModelLink: the even split only."""
    assert _space(name).layer_form == form


@pytest.mark.parametrize("version,allowed", [("1.0", False), ("2.0.0", True)])
def test_explicit_version_decides_context_parallel(version, allowed):
    """--version 1.0 (ModelLink RC1) has no --context-parallel-size; 2.0.0 has."""
    assert _space("pretrain_llama2_7b_ptd.sh", version).allow_cp is allowed


def test_swap_optimizer_requires_the_distributed_optimizer():
    """A script with --swap-optimizer is searched only with the distributed optimizer."""
    assert _space("pretrain_deepseek3_671b_4k_ptd.sh").require_dist_opt is True
    assert _space("pretrain_llama2_7b_ptd.sh").require_dist_opt is False
