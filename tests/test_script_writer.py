"""apply_strategy: where each change lands, what is removed, version rules and errors."""

from __future__ import annotations

import pytest
from script_support import FIXTURES

from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.errors import ConfigError, StrategyError
from tinker_opt.script.reader import read_script_text
from tinker_opt.strategy import Strategy

MODEL = "--num-layers 8 --hidden-size 64 --num-attention-heads 8 --seq-length 128 --vocab-size 1000"


def text_of(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    old, new = before.splitlines(), after.splitlines()
    return [line for line in old if line not in new], [line for line in new if line not in old]


def test_variable_used_once_changes_at_its_assignment():
    """TP=1 ... ${TP}: the assignment changes, the flag line does not."""
    text = text_of("pretrain_llama2_7b_ptd.sh")
    out = apply_strategy(
        text, Strategy(tp=2, pp=2, dp=2, sp=True, zero=1), nnodes=1, nproc_per_node=8
    )
    assert changed_lines(text, out.text) == (["TP=1"], ["TP=2"])


def test_shared_variable_changes_at_the_reference():
    """MBS also feeds GBS=$((MBS*64)): the ${MBS} reference becomes a literal, MBS=1 stays."""
    text = text_of("pretrain_internlm3_8b_4k_ptd.sh")
    out = apply_strategy(
        text, Strategy(tp=2, pp=4, dp=1, sp=True, zero=1, mbs=2), nnodes=1, nproc_per_node=8
    )
    assert "MBS=1\n" in out.text and "    --micro-batch-size 2 \\\n" in out.text
    assert read_script_text(out.text).train.global_batch_size == 64


def test_new_flags_join_the_group_holding_parallel_flags():
    """cp and vpp go next to --pipeline-model-parallel-size inside MODEL_PARALLEL_ARGS."""
    text = text_of("pretrain_llama3_8b_dist_algo_ptd.sh")
    out = apply_strategy(
        text,
        Strategy(tp=2, pp=2, dp=1, cp=2, vpp=2, sp=True, cp_algo="ulysses_cp_algo"),
        nnodes=1,
        nproc_per_node=8,
    )
    assert (
        "    --pipeline-model-parallel-size $PP \\\n    --context-parallel-size 2 \\\n"
        "    --context-parallel-algo ulysses_cp_algo \\\n"
        "    --num-layers-per-virtual-pipeline-stage 8 \\\n    --sequence-parallel\n" in out.text
    )


def test_new_flags_on_a_one_line_launch():
    """Pre-1.0 style: flags sit on the launch line, so new ones are added there."""
    text = text_of("pretrain_llama_13b_ptd_modellink.sh")
    out = apply_strategy(
        text, Strategy(tp=4, pp=2, dp=1, sp=True, zero=1, mbs=2), nnodes=1, nproc_per_node=8
    )
    assert (
        "      --pipeline-model-parallel-size 2 \\\n      --use-distributed-optimizer \\\n"
        in out.text
    )


def test_new_flags_in_a_megatron_array():
    """In a bash array new elements get their own line, without a backslash."""
    text = text_of("train_gpt3_175b_distributed.sh")
    out = apply_strategy(text, Strategy(tp=8, pp=16, dp=1, sp=True), nnodes=16, nproc_per_node=8)
    assert "\t--pipeline-model-parallel-size 16\n\t--sequence-parallel\n" in out.text


def test_switched_off_flags_are_removed_with_companions():
    """No dist-opt removes --overlap-param-gather too; cp 1 removes the algo and ring options."""
    text = text_of("pretrain_qwen2_72b_32k_ptd.sh")
    out = apply_strategy(text, Strategy(tp=8, pp=4, dp=1, sp=True), nnodes=4, nproc_per_node=8)
    removed, added = changed_lines(text, out.text)
    assert set(removed) >= {
        "    --use-distributed-optimizer \\",
        "    --context-parallel-algo ${CP_ALGO} \\",
        "    --use-cp-send-recv-overlap \\",
        "    --cp-attention-mask-type causal \\",
        "    --recompute-granularity full \\",
    }
    assert "CP=1" in added and "CP_ALGO=megatron_cp_algo" in out.text


def test_switching_to_ulysses_drops_ring_options():
    """Ring-only companions go when the algorithm becomes ulysses."""
    text = text_of("pretrain_qwen2_72b_32k_ptd.sh")
    out = apply_strategy(
        text,
        Strategy(
            tp=8,
            pp=2,
            dp=1,
            cp=2,
            cp_algo="ulysses_cp_algo",
            sp=True,
            zero=1,
            recompute="full",
            recompute_method="uniform",
            recompute_num_layers=1,
        ),
        nnodes=4,
        nproc_per_node=8,
    )
    assert "--use-cp-send-recv-overlap" not in out.text and "CP_ALGO=ulysses_cp_algo" in out.text


def test_selective_recompute_replaces_full():
    """Selective recompute keeps granularity, drops method and layer count."""
    text = text_of("pretrain_llama2_13B_ptd_8p.sh")
    out = apply_strategy(
        text, Strategy(tp=8, dp=1, sp=True, recompute="selective"), nnodes=1, nproc_per_node=8
    )
    assert "--recompute-granularity selective" in out.text and "--recompute-method" not in out.text


def test_header_after_shebang_and_replaced_on_reapply():
    """Header lines follow the shebang; applying again replaces the old block."""
    text = text_of("pretrain_llama2_7b_ptd.sh")
    strategy = Strategy(tp=1, pp=2, dp=4, zero=1)
    once = apply_strategy(text, strategy, nnodes=1, nproc_per_node=8, header=["a", "b"]).text
    assert once.startswith("#!/bin/bash\n# tinker-opt: a\n# tinker-opt: b\n\n")
    twice = apply_strategy(once, strategy, nnodes=1, nproc_per_node=8, header=["c"]).text
    assert twice.startswith("#!/bin/bash\n# tinker-opt: c\n\n")


def test_node_counts_follow_the_target():
    """NNODES / NPUS_PER_NODE assignments change; WORLD_SIZE follows by itself."""
    text = text_of("pretrain_llama2_7b_ptd.sh")
    out = apply_strategy(text, Strategy(tp=1, pp=2, dp=16, zero=1), nnodes=4, nproc_per_node=8)
    assert changed_lines(text, out.text) == (["NNODES=1"], ["NNODES=4"])


def test_msrun_counts():
    """msrun: local_worker_num via NPUS_PER_NODE, worker_num via NNODES in WORLD_SIZE."""
    text = text_of("pretrain_qwen3_8b_4k_ms.sh")
    out = apply_strategy(
        text, Strategy(tp=4, pp=2, dp=2, sp=True, zero=1), nnodes=2, nproc_per_node=8
    )
    assert changed_lines(text, out.text) == (["NNODES=1"], ["NNODES=2"])


def test_literal_launcher_counts():
    """--nnodes=N and --nproc_per_node=N literals change in place."""
    text = f"#!/bin/bash\ntorchrun --nnodes=1 --nproc_per_node=8 pretrain_gpt.py {MODEL}\n"
    out = apply_strategy(text, Strategy(dp=8), nnodes=2, nproc_per_node=4)
    assert "torchrun --nnodes=2 --nproc_per_node=4 pretrain_gpt.py" in out.text


def test_checkpoint_warning_when_tp_changes():
    """--load with a tp/pp/ep change warns to convert the checkpoint."""
    text = text_of("pretrain_llama2_13B_ptd_8p.sh")
    out = apply_strategy(text, Strategy(tp=4, pp=2, dp=1, sp=True), nnodes=1, nproc_per_node=8)
    assert len(out.warnings) == 1 and "convert" in out.warnings[0] and "tp=8" in out.warnings[0]


def test_no_warning_without_load():
    """Without --load there is nothing to convert."""
    text = text_of("pretrain_mixtral_8x7b_ptd.sh")
    out = apply_strategy(text, Strategy(tp=2, pp=4, dp=2, ep=4), nnodes=2, nproc_per_node=8)
    assert out.warnings == ()


def test_etp_needs_version_220():
    """--expert-tensor-parallel-size is refused for MindSpeed-LLM 2.0.0 (added in 2.2.0)."""
    text = text_of("pretrain_mixtral_8x7b_ptd.sh")
    with pytest.raises(StrategyError, match=r"--expert-tensor-parallel-size.*2\.0\.0.*2\.2\.0"):
        apply_strategy(
            text,
            Strategy(tp=2, pp=4, dp=2, ep=2, etp=1),
            nnodes=2,
            nproc_per_node=8,
            version="2.0.0",
        )
    out = apply_strategy(
        text, Strategy(tp=2, pp=4, dp=2, ep=2, etp=1), nnodes=2, nproc_per_node=8, version="2.3.0"
    )
    assert "--expert-tensor-parallel-size 1" in out.text


def test_etp_equal_to_tp_needs_no_flag_on_old_versions():
    """etp = tp is the default, so old versions express it without the flag (read back as None)."""
    text = text_of("pretrain_mixtral_8x7b_ptd.sh")
    out = apply_strategy(
        text, Strategy(tp=2, pp=4, dp=2, ep=2, etp=2), nnodes=2, nproc_per_node=8, version="2.0.0"
    )
    assert read_script_text(out.text).train.strategy.etp is None


def test_context_parallel_needs_rc3():
    """Tinker's version 1.1 (RC2) has no context parallelism."""
    text = text_of("pretrain_llama2_13B_ptd_8p.sh")
    with pytest.raises(StrategyError, match="--context-parallel-size"):
        apply_strategy(text, Strategy(tp=4, cp=2, dp=1), nnodes=1, nproc_per_node=8, version="1.1")


def test_vpp_needs_rc2():
    """Tinker's version 1.0 (RC1) has no virtual pipeline."""
    text = text_of("pretrain_llama2_13B_ptd_8p.sh")
    with pytest.raises(StrategyError, match="--num-layers-per-virtual-pipeline-stage"):
        apply_strategy(
            text, Strategy(tp=2, pp=4, vpp=2, dp=1), nnodes=1, nproc_per_node=8, version="1.0"
        )


def test_megatron_has_only_ring_context_parallel():
    """Megatron-LM scripts cannot take ulysses_cp_algo."""
    text = text_of("train_gpt3_175b_distributed.sh")
    with pytest.raises(StrategyError, match="MindSpeed-LLM only"):
        apply_strategy(
            text, Strategy(tp=8, pp=8, cp=2, cp_algo="ulysses_cp_algo"), nnodes=16, nproc_per_node=8
        )


def test_megatron_layer_list_needs_equal_middle_stages():
    """Megatron can set only the first and last stage sizes."""
    text = text_of("train_mixtral_8x7b_distributed.sh")
    with pytest.raises(StrategyError, match="first and last"):
        apply_strategy(
            text,
            Strategy(pp=4, dp=8, ep=8, num_layer_list=(7, 8, 9, 8)),
            nnodes=4,
            nproc_per_node=8,
        )
    out = apply_strategy(
        text, Strategy(pp=4, dp=8, ep=8, num_layer_list=(6, 9, 9, 8)), nnodes=4, nproc_per_node=8
    )
    assert "--decoder-first-pipeline-num-layers 6" in out.text


def test_world_size_mismatch():
    """tp x pp x cp x dp must equal the cluster's device count."""
    text = text_of("pretrain_llama2_7b_ptd.sh")
    with pytest.raises(StrategyError, match="16 devices"):
        apply_strategy(text, Strategy(tp=2, pp=2, dp=2), nnodes=2, nproc_per_node=8)


def test_expert_parallel_on_a_dense_model():
    """ep > 1 needs experts."""
    text = text_of("pretrain_llama2_7b_ptd.sh")
    with pytest.raises(StrategyError, match="no experts"):
        apply_strategy(text, Strategy(ep=2, dp=8), nnodes=1, nproc_per_node=8)


def test_layer_list_with_vpp_is_refused():
    """--num-layer-list is never combined with a virtual pipeline."""
    text = text_of("pretrain_llama2_7b_ptd.sh")
    with pytest.raises(StrategyError, match="virtual pipeline"):
        apply_strategy(
            text, Strategy(pp=2, dp=4, vpp=2, num_layer_list=(15, 17)), nnodes=1, nproc_per_node=8
        )


def test_layer_list_must_sum_to_script_layers():
    """The list counts the script's --num-layers (noop layers included)."""
    text = text_of("pretrain_deepseek3_671b_4k_ptd.sh")
    with pytest.raises(StrategyError, match="sums to 61"):
        apply_strategy(
            text,
            Strategy(tp=2, pp=2, dp=32, ep=16, num_layer_list=(30, 31)),
            nnodes=16,
            nproc_per_node=8,
        )


def test_pp_must_divide_layers_without_list():
    """Without a layer list pp divides --num-layers."""
    text = text_of("pretrain_llama2_7b_ptd.sh")
    with pytest.raises(StrategyError, match="not divisible by pp"):
        apply_strategy(text, Strategy(pp=3, dp=2), nnodes=1, nproc_per_node=6)


def test_heads_must_divide_by_tp():
    """num_attention_heads % tp == 0."""
    text = text_of("tune_qwen25_0point5b_4k_full_ptd.sh")
    with pytest.raises(StrategyError, match="multiples of tp"):
        apply_strategy(text, Strategy(tp=4, dp=2), nnodes=1, nproc_per_node=8)


def test_unknown_version_string():
    """A version that is neither MindSpeed nor Megatron is a config error."""
    with pytest.raises(ConfigError, match="unknown framework version"):
        apply_strategy(
            text_of("pretrain_llama2_7b_ptd.sh"),
            Strategy(pp=2, dp=4),
            nnodes=1,
            nproc_per_node=8,
            version="banana",
        )


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2", "1.0.0", "2.0.0", "2.3.0", "26.0.0"])
def test_tinker_versions_are_accepted(version):
    """Tinker's version values all work for a plain tp/pp strategy."""
    out = apply_strategy(
        text_of("pretrain_llama2_7b_ptd.sh"),
        Strategy(tp=2, pp=2, dp=2),
        nnodes=1,
        nproc_per_node=8,
        version=version,
    )
    assert read_script_text(out.text).train.strategy.tp == 2


def test_write_script_refuses_the_input(tmp_path):
    """The tuned script never replaces its source."""
    from tinker_opt.emit.script_writer import write_script

    source = tmp_path / "run.sh"
    source.write_text("#!/bin/bash\n")
    with pytest.raises(ConfigError, match="is the input script"):
        write_script(tmp_path / "." / "run.sh", "x", source=source)


def test_write_script_keeps_bytes_and_mode(tmp_path):
    """The file holds exactly the text (CRLF included) and is executable like its source."""
    from tinker_opt.emit.script_writer import write_script

    source = tmp_path / "run.sh"
    source.write_text("#!/bin/bash\n")
    source.chmod(0o750)
    out = write_script(tmp_path / "out" / "tuned.sh", "a\r\nb\n", source=source)
    assert out.read_bytes() == b"a\r\nb\n" and (out.stat().st_mode & 0o777) == 0o750


def test_crlf_script_round_trips_with_crlf_lines():
    """A CRLF script is read (with a warning) and new lines keep CRLF endings."""
    text = text_of("pretrain_llama2_7b_ptd.sh").replace("\n", "\r\n")
    assert any("CRLF" in w for w in read_script_text(text).warnings)
    strategy = Strategy(
        tp=2,
        pp=2,
        dp=2,
        cp=2,
        sp=True,
        recompute="full",
        recompute_method="block",
        recompute_num_layers=2,
    )
    out = apply_strategy(text, strategy, nnodes=2, nproc_per_node=8, header=["x"])
    assert read_script_text(out.text).train.strategy == strategy.replace(
        cp_algo="megatron_cp_algo", overlap_grad_reduce=False, tp_comm_overlap=False
    )
    assert "\n" not in out.text.replace("\r\n", "")


def test_flags_added_and_removed_next_to_a_quoted_value():
    """`--pipeline-model-parallel-size "$PP"` in an array: a new flag goes after the closing
    quote (it used to land inside it, giving the value '1 --use-distributed-optimizer'), and a
    removed flag takes its quotes along."""
    head = f"#!/bin/bash\nPP=1\nGPT_ARGS=({MODEL})\n"
    launch = 'torchrun --nproc_per_node 8 pretrain_gpt.py ${GPT_ARGS[@]} "${PAR[@]}"\n'
    text = (
        head
        + 'PAR=(\n    --tensor-model-parallel-size 1\n    --pipeline-model-parallel-size "$PP"\n)\n'
        + launch
    )
    out = apply_strategy(text, Strategy(tp=1, pp=1, dp=8, zero=1), nnodes=1, nproc_per_node=8)
    assert '    --pipeline-model-parallel-size "$PP"\n    --use-distributed-optimizer\n' in out.text
    text = (
        head
        + 'PAR=(\n    --tensor-model-parallel-size 1 "--use-distributed-optimizer"\n)\n'
        + launch
    )
    out = apply_strategy(text, Strategy(tp=1, pp=1, dp=8), nnodes=1, nproc_per_node=8)
    assert "    --tensor-model-parallel-size 1\n)" in out.text


def test_dualpipev_and_fb_overlap_round_trip():
    """`--schedules-method dualpipev` and `--moe-fb-overlap` are read, written and removed."""
    text = text_of("pretrain_deepseek3_671b_4k_ptd.sh")
    info = read_script_text(text, "ds.sh")
    assert info.train.strategy.schedule == "1f1b" and not info.train.strategy.moe_fb_overlap
    target = info.train.strategy.replace(
        dualpipev=True, moe_fb_overlap=True, overlap_grad_reduce=False
    )
    out = apply_strategy(text, target, nnodes=16, nproc_per_node=8, version="2.2.0")
    again = read_script_text(out.text, "ds_v.sh").train.strategy
    assert again.schedule == "dualpipev" and again.moe_fb_overlap
    back = apply_strategy(out.text, info.train.strategy, nnodes=16, nproc_per_node=8)
    assert "--schedules-method" not in back.text and "--moe-fb-overlap" not in back.text
