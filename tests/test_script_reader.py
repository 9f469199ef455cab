"""Reading launch scripts into ModelSpec / TrainSpec, inspect_dict, labels and reader errors."""

from __future__ import annotations

import json

import pytest
from script_support import FIXTURES

from tinker_opt.errors import ScriptError
from tinker_opt.script.reader import (
    inspect_dict,
    labels_from_filename,
    read_script,
    read_script_text,
)

MODEL = "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000"


def fixture(name: str):
    return read_script(FIXTURES / name)


def test_dense_gqa_model():
    """GQA groups, ffn, vocabulary padding, swiglu, RMSNorm and rope are read."""
    model = fixture("pretrain_qwen25_7b_32k_ptd.sh").model
    assert (model.num_layers, model.hidden_size, model.ffn_hidden_size) == (28, 3584, 18944)
    assert (model.num_attention_heads, model.num_query_groups, model.seq_length) == (28, 4, 32768)
    assert model.padded_vocab_size == 152064 and model.swiglu and model.normalization == "RMSNorm"
    assert model.position_embedding_type == "rope" and model.untie_embeddings_and_output_weights


def test_moe_mla_mtp_and_noop_layers():
    """DeepSeek-V3 style: layers net of noop, experts, shared experts, MLA ranks, MTP."""
    info = fixture("pretrain_deepseek3_671b_4k_ptd.sh")
    model = info.model
    assert model.num_layers == 61 and info.num_layers_in_script == 64
    assert model.noop_layers == (61, 62, 63)
    assert (model.num_experts, model.moe_router_topk, model.moe_ffn_hidden_size) == (256, 8, 2048)
    assert model.moe_shared_expert_intermediate_size == 2048 and model.first_k_dense_replace == 3
    assert model.multi_latent_attention and (model.q_lora_rank, model.kv_lora_rank) == (1536, 512)
    assert model.mtp_num_layers == 1


def test_gqa_flag_needed_for_query_groups():
    """Without --group-query-attention Megatron ignores --num-query-groups."""
    info = read_script_text(f"torchrun pretrain_gpt.py {MODEL} --num-query-groups 2")
    assert info.model.num_query_groups == 4


def test_swiglu_default_ffn():
    """Without --ffn-hidden-size, swiglu gives Megatron's 4h*2/3 rounded down to 64."""
    info = read_script_text(
        "torchrun pretrain_gpt.py --num-layers 2 --hidden-size 4096 "
        "--num-attention-heads 32 --seq-length 64 --vocab-size 10 --swiglu"
    )
    assert info.model.ffn_hidden_size == 10880


def test_current_strategy_with_vpp_recompute_and_dist_opt():
    """vpp = L / (pp x layers-per-chunk); full recompute with method and layer count."""
    strategy = fixture("pretrain_llama2_70b_4k_ptd.sh").train.strategy
    assert (strategy.tp, strategy.pp, strategy.dp, strategy.vpp) == (8, 4, 1, 4)
    assert (strategy.recompute, strategy.recompute_method, strategy.recompute_num_layers) == (
        "full",
        "block",
        4,
    )
    assert strategy.dist_opt and strategy.sp


def test_expert_and_context_parallel_strategy():
    """ep and etp from MOE_ARGS; cp and its algorithm from a single-quoted variable."""
    moe = fixture("pretrain_qwen3_30b_a3b_4k_A3_ptd.sh").train.strategy
    assert (moe.ep, moe.etp, moe.dp) == (8, 1, 2)
    cp = fixture("pretrain_qwen25_7b_32k_ptd.sh").train.strategy
    assert (cp.cp, cp.cp_algo, cp.sp) == (8, "ulysses_cp_algo", False)


def test_etp_defaults():
    """No --expert-tensor-parallel-size: None, or 1 with --moe-tp-extend-ep."""
    base = f"torchrun pretrain_gpt.py {MODEL} --num-experts 4 --tensor-model-parallel-size 2"
    assert read_script_text(base).train.strategy.etp is None
    assert read_script_text(base + " --moe-tp-extend-ep").train.strategy.etp == 1


def test_tp_extend_ep_spreads_the_experts_over_tp_times_ep():
    """MindSpeed's --moe-tp-extend-ep: the tp group splits the experts, not their weights
    (num_experts % (tp x ep) == 0; megatron-moe-tp-extend-ep.md): Megatron-Core's expert grid of
    tp x ep ranks at etp 1, written back as the script's own ep."""
    base = f"torchrun --nproc_per_node 8 pretrain_gpt.py {MODEL} --num-experts 8 "
    base += "--tensor-model-parallel-size 2 --expert-model-parallel-size 2"
    plain = read_script_text(base).train.strategy
    extend = read_script_text(base + " --moe-tp-extend-ep").train.strategy
    assert (plain.ep, plain.expert_tp) == (2, 2)
    assert (extend.ep, extend.expert_tp) == (4, 1)


def test_layer_list_and_megatron_first_last():
    """--num-layer-list and Megatron's first/last stage counts give num_layer_list."""
    assert fixture("pretrain_mixtral_8x7B_rc1_ptd.sh").train.strategy.num_layer_list == (7, 8, 8, 9)
    text = (
        f"torchrun --nproc_per_node 4 pretrain_gpt.py {MODEL.replace('--num-layers 4', '--num-layers 10')} "
        "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 1 "
        "--decoder-last-pipeline-num-layers 3"
    )
    assert read_script_text(text).train.strategy.num_layer_list == (1, 3, 3, 3)


def test_launchers_and_cluster():
    """torch.distributed.launch, msrun (worker_num / local_worker_num) and deepspeed are found."""
    ms = fixture("pretrain_qwen3_8b_4k_ms.sh")
    assert (ms.train.framework.launcher, ms.train.nnodes, ms.train.nproc_per_node) == (
        "msrun",
        1,
        8,
    )
    assert ms.train.framework.entry == "$basepath/pretrain_gpt.py"
    ds = fixture("pretrain_llama_7b_zero_8p.sh")
    assert (ds.train.framework.launcher, ds.train.framework.entry) == (
        "deepspeed",
        "pretrain_llama.py",
    )
    glm = fixture("pretrain_chatglm3_6b_64k_ptd.sh")
    assert (glm.train.framework.launcher, glm.train.nnodes) == ("torch.distributed.launch", 2)


def test_flavours():
    """legacy / mcore MindSpeed and Megatron-LM are told apart."""
    assert fixture("pretrain_llama2_13B_ptd_8p.sh").train.framework.flavour == "legacy"
    assert fixture("pretrain_llama2_7b_ptd.sh").train.framework.flavour == "mcore"
    assert fixture("train_gpt3_175b_distributed.sh").train.framework.flavour == "megatron"


def test_version_bounds_from_flags():
    """Flags bound the version: ETP means >= 2.2.0, --moe-train-capacity-factor means < 1.0.0."""
    assert fixture("pretrain_qwen3_30b_a3b_4k_A3_ptd.sh").version_range.describe() == ">=2.2.0"
    assert fixture("pretrain_mixtral_8x7B_rc1_ptd.sh").version_range.describe() == "<1.0.0"


@pytest.mark.parametrize(
    "name, full",
    [
        ("tune_qwen25_0point5b_4k_full_ptd.sh", True),
        ("tune_llama2_7b_lora_ptd.sh", False),
        ("pretrain_llama2_7b_ptd.sh", False),
    ],
)
def test_full_tune_detection(name, full):
    """Full fine-tune: posttrain entry / "tune"+"full" name / --finetune, but not LoRA."""
    assert fixture(name).train.is_full_tune is full


def test_finetune_flag_means_full_tune():
    """--finetune without LoRA flags is a full fine-tune."""
    assert read_script_text(f"torchrun pretrain_gpt.py {MODEL} --finetune").train.is_full_tune


def test_loads_checkpoint():
    """--load anywhere (group or launch line) means a checkpoint is loaded."""
    assert fixture("pretrain_llama2_13B_ptd_8p.sh").train.loads_checkpoint
    assert not fixture("pretrain_mixtral_8x7b_ptd.sh").train.loads_checkpoint


def test_warnings_for_undefined_variables():
    """Undefined variables are reported, not fatal."""
    warnings = fixture("pretrain_qwen3_8b_4k_ms.sh").warnings
    assert any("MOE_ARGS is not set" in w for w in warnings)


def test_inspect_dict_shape():
    """inspect --json has model / cluster / strategy / knobs / framework with Megatron key names."""
    data = inspect_dict(fixture("pretrain_mixtral_8x7b_ptd.sh"))
    assert set(data) == {"model", "cluster", "strategy", "knobs", "framework"}
    assert data["cluster"] == {"nnodes": 2, "nproc_per_node": 8}
    assert data["model"]["micro_batch_size"] == 1 and data["model"]["global_batch_size"] == 8
    assert data["model"]["num_experts"] == 8 and data["model"]["moe_router_topk"] == 2
    assert data["strategy"]["ep"] == 2 and data["framework"]["launcher"] == "torchrun"
    json.dumps(data)


@pytest.mark.parametrize(
    "name, labels",
    [
        ("pretrain_llama2_7b_ptd.sh", ("llama2", "7b")),
        ("tune_qwen25_0point5b_4k_full_ptd.sh", ("qwen25", "0.5b")),
        ("pretrain_mixtral_8x7b_ptd.sh", ("mixtral", "8x7b")),
        ("pretrain_llama2_13B_ptd_8p.sh", ("llama2", "13b")),
        ("pretrain_qwen2_moe_57b_a14b_4k_ptd.sh", ("qwen2_moe", "57b")),
        ("run.sh", ("model", "unknown")),
    ],
)
def test_labels_from_filename(name, labels):
    """Model and size labels from the file name (13B stays 13b)."""
    assert labels_from_filename(name) == labels


def test_missing_file():
    """A missing script names the path."""
    with pytest.raises(ScriptError, match="not found"):
        read_script(FIXTURES / "nope.sh")


def test_no_launch_line():
    """A script without a launch is a clear error."""
    with pytest.raises(ScriptError, match="no training launch"):
        read_script_text("#!/bin/bash\necho hello\n")


def test_commented_out_launch_is_ignored():
    """# torchrun ... does not count as a launch."""
    with pytest.raises(ScriptError, match="no training launch"):
        read_script_text(f"#!/bin/bash\n# torchrun pretrain_gpt.py {MODEL}\n")


def test_missing_model_arguments():
    """Missing required model flags are named."""
    with pytest.raises(ScriptError, match="--hidden-size, --seq-length"):
        read_script_text("torchrun pretrain_gpt.py --num-layers 2 --num-attention-heads 2")


def test_flag_without_integer_value():
    """A size flag whose variable is unset is named."""
    with pytest.raises(ScriptError, match="--hidden-size has no value"):
        read_script_text(
            "torchrun pretrain_gpt.py --num-layers 2 --hidden-size $H "
            "--num-attention-heads 2 --seq-length 8"
        )
