"""Reading Tinker's profiled_data.csv folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tinker_folder import (
    LLAMA2_7B,
    LLAMA2_70B,
    TINY,
    block_rows,
    profile_space,
    write_tinker_folder,
)

from tinker_opt.errors import ProfileDataError
from tinker_opt.profile.store import load_profiled_data
from tinker_opt.profile.tinker_compat import parse_config, read_tinker_folder

ROOT = Path(__file__).resolve().parents[1]

HEADER = (
    "config,block_name,forward-compute,backward_compute,input_size,output_size,weights,activations,"
    "fwd_reserved,bwd_reserved"
)
GROUP_TP1 = """llama2_7b_tp1_sp0_ep1_mbs1_algo0,embedding,120.5,300,0.0078,16,250,0.5,2,3
llama2_7b_tp1_sp0_ep1_mbs1_algo0,transformer_block,4000,8000,16,16,386,300.25,40,60
llama2_7b_tp1_sp0_ep1_mbs1_algo0,final_norm,50,90,16,16,0.0078,16,1,1
llama2_7b_tp1_sp0_ep1_mbs1_algo0,post_process,3000,5000,16,0,250,500,100,200"""
GROUP_TP2 = """llama2_7b_tp2_sp1_ep2_mbs2_algo0,embedding,100,200,0.0156,16,125,0.5,2,3
llama2_7b_tp2_sp1_ep2_mbs2_algo0,transformer_block,2500,5000,16,16,193,150,20,30"""


@pytest.fixture()
def tinker_folder(tmp_path):
    folder = tmp_path / "profiled-data-llama2-7b-240101-120000"
    folder.mkdir()
    (folder / "profiled_data.csv").write_text(
        f"{HEADER}\n{GROUP_TP1}\n\n{GROUP_TP2}\n", encoding="utf-8"
    )
    (folder / "model_info_seq4096.json").write_text(
        json.dumps({"seq_length": 4096, "fp16": False, "bf16": True, "num_layers": 32}),
        encoding="utf-8",
    )
    (folder / "VERSION_1.1.json").write_text(json.dumps({"max_npu": 8}), encoding="utf-8")
    (folder / "p2p_intra_node.csv").write_text("1,16,256\n10,20,25\n", encoding="utf-8")
    return folder


def test_parse_config_keeps_underscores_in_the_name():
    """The model name may hold underscores; the strategy suffix is parsed from the right."""
    assert parse_config("my_model_13b_tp4_sp1_ep2_mbs8_algo0") == {
        "prefix": "my_model_13b",
        "tp": 4,
        "sp": 1,
        "ep": 2,
        "mbs": 8,
        "algo": 0,
    }


def test_blocks_are_mapped_and_converted(tinker_folder):
    """Block names map to ours, MiB become bytes, times stay microseconds."""
    blocks = read_tinker_folder(tinker_folder).blocks.set_index(["block", "tp", "mbs"])
    layer = blocks.loc[("layer", 1, 1)]
    assert layer["activation_bytes"] == round(300.25 * 2**20)
    assert layer["weight_bytes"] == 386 * 2**20 and layer["param_count"] == 386 * 2**20 // 2
    assert layer["fwd_us"] == 4000 and layer["transient_bytes"] == 60 * 2**20
    assert set(blocks.index.get_level_values("block")) == {
        "embedding",
        "layer",
        "final_norm",
        "head",
    }


def test_expert_parallel_rows_get_etp_equal_tp(tinker_folder):
    """A Tinker row with ep > 1 has Megatron's default expert tensor parallel size (tp)."""
    blocks = read_tinker_folder(tinker_folder).blocks
    row = blocks[(blocks["block"] == "layer") & (blocks["tp"] == 2)].iloc[0]
    assert (row["ep"], row["etp"], row["sp"], row["cp"]) == (2, 2, 1, 1)


def test_p2p_table_is_kept_but_not_a_link(tinker_folder):
    """p2p_intra_node.csv is Tinker's fixed table: no comm rows, kept in the meta for reference."""
    data = read_tinker_folder(tinker_folder)
    assert data.comm.empty
    assert data.meta.extra["tinker_p2p_table"] == {
        "sizes_mb": [1, 16, 256],
        "bandwidths_gbs": [10, 20, 25],
    }


def test_store_dispatches_to_tinker_reader(tinker_folder):
    """load_profiled_data recognises a Tinker folder and reads its model info."""
    data = load_profiled_data(tinker_folder)
    assert (
        data.meta.source == "tinker"
        and data.meta.extra["seq_length"] == 4096
        and len(data.blocks) == 6
    )


def test_bad_config_is_a_profile_data_error(tmp_path):
    """A config string without the strategy suffix names the expected pattern."""
    (tmp_path / "profiled_data.csv").write_text(
        f"{HEADER}\nllama_7b,embedding,1,1,1,1,1,1,1,1\n", encoding="utf-8"
    )
    with pytest.raises(ProfileDataError, match="tp<T>"):
        read_tinker_folder(tmp_path)


# -- folders written the way Tinker 1.3 writes them (tests/tinker_folder.py) -------------------


@pytest.fixture()
def llama7b(tmp_path):
    return write_tinker_folder(tmp_path, LLAMA2_7B, oom=((1, 0, 4),))


def _written(shape, tp, sp, mbs, block):
    """A block's eight numbers as Tinker's %.3f formatting leaves them."""
    return [float(f"{v:.3f}") for v in block_rows(shape, tp, sp, mbs)[block]]


def test_generated_folder_reads_every_measured_group(llama7b):
    """Each (tp, sp, mbs) group gives four blocks; the out-of-memory group is left out."""
    data = load_profiled_data(llama7b)
    groups = set(profile_space(LLAMA2_7B)) - {(1, 0, 4)}
    shapes = set(zip(data.blocks["tp"], data.blocks["sp"], data.blocks["mbs"], strict=True))
    assert shapes == groups and len(data.blocks) == 4 * len(groups)
    assert (data.blocks["status"] == "ok").all()


def test_generated_values_are_read_in_tinker_units(llama7b):
    """Microseconds stay microseconds; MiB become bytes; weights / 2 B are parameters."""
    fwd, bwd, inp, _out, weights, act, fwd_res, bwd_res = _written(
        LLAMA2_7B, 2, 1, 2, "transformer_block"
    )
    blocks = read_tinker_folder(llama7b).blocks.set_index(["block", "tp", "sp", "mbs"])
    layer = blocks.loc[("layer", 2, 1, 2)]
    assert (layer["fwd_us"], layer["bwd_us"]) == (fwd, bwd)
    assert layer["input_bytes"] == round(inp * 2**20) and layer["activation_bytes"] == round(
        act * 2**20
    )
    assert (
        layer["weight_bytes"] == round(weights * 2**20)
        and layer["param_count"] == round(weights * 2**20) // 2
    )
    assert layer["transient_bytes"] == round(max(fwd_res, bwd_res) * 2**20)


def test_block_times_are_marked_as_holding_tp_collectives(llama7b):
    """The meta flags say the block times already include the TP / SP (and EP) collectives."""
    meta = read_tinker_folder(llama7b).meta
    assert meta.times_include_tp_comm is True and meta.times_include_ep_comm is True


def test_labels_and_framework_version_come_from_the_version_file(tmp_path):
    """model_name / model_size (and, for reference, the framework version) are the VERSION file's."""
    folder = write_tinker_folder(
        tmp_path, LLAMA2_70B, version={"model_name": "llama2chat", "version": "1.2"}
    )
    meta = read_tinker_folder(folder).meta
    assert (meta.model_name, meta.model_size, meta.extra["tinker_framework_version"]) == (
        "llama2chat",
        "70b",
        "1.2",
    )
    assert (
        meta.framework_version is None
    )  # the launch script decides which framework's flags are written
    assert meta.extra["version_file"] == "VERSION_TinkerProfiler-1.3.3.json"


def test_labels_fall_back_to_the_config_prefix(tmp_path):
    """Without labels in VERSION, `<name>_<size>` of the config names the model; a note says so."""
    folder = write_tinker_folder(
        tmp_path, LLAMA2_7B, version={"model_name": None, "model_size": None}
    )
    meta = read_tinker_folder(folder).meta
    assert (meta.model_name, meta.model_size) == ("llama2", "7b")
    assert any("config prefix" in note for note in meta.notes)


def test_old_version_file_has_no_framework_version(tmp_path):
    """A pre-1.3 VERSION file's `version` is the profiler's, not the framework's."""
    folder = write_tinker_folder(
        tmp_path, TINY, version={"version_profiler": None, "version": "TinkerProfiler-1.1.0"}
    )
    assert "tinker_framework_version" not in read_tinker_folder(folder).meta.extra


def test_script_path_is_taken_only_when_it_exists(tmp_path):
    """VERSION's pretrain_script_path becomes script_path only if that file is here."""
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\n", encoding="utf-8")
    here = read_tinker_folder(
        write_tinker_folder(tmp_path, TINY, version={"pretrain_script_path": str(script)})
    ).meta
    assert here.script_path == str(script.resolve())
    gone = read_tinker_folder(write_tinker_folder(tmp_path / "b", TINY)).meta
    assert gone.script_path is None and any("not here" in note for note in gone.notes)


def test_attention_mask_memory_is_read_once(llama7b):
    """Tinker's per-layer mask (seq^2 bytes) is recorded once as attention_mask_bytes."""
    meta = read_tinker_folder(llama7b).meta
    assert meta.attention_mask_bytes == 4096**2 and meta.extra["seq_length"] == 4096
    assert any("attention mask 16.0 MiB" in note for note in meta.notes)


def test_shrunk_profiling_layer_count_is_ignored(tmp_path):
    """num_layers 1 in model_info is the shrunk profiling script's, so it is not the model's."""
    folder = write_tinker_folder(tmp_path, TINY, model_info_layers=1)
    meta = read_tinker_folder(folder).meta
    assert meta.extra["num_layers"] is None and any("num_layers 1" in note for note in meta.notes)


def test_notes_say_what_was_assumed(llama7b):
    """One note per assumption: TP collectives, the p2p table, the mask, the labels, the failed rows."""
    notes = read_tinker_folder(llama7b).meta.notes
    assert all(isinstance(note, str) and "\n" not in note for note in notes)
    for fragment in (
        "TP/SP collectives",
        "p2p_intra_node.csv",
        "attention mask",
        "VERSION_TinkerProfiler-1.3.3.json",
        "tp1_sp0_ep1_mbs4",
    ):
        assert any(fragment in note for note in notes), fragment


def test_p2p_table_does_not_set_the_intra_node_link(llama7b):
    """The cost model takes the documented default link (and warns), not the table's ~19 GB/s."""
    from tinker_opt.costs.comm_model import DEFAULT_LINKS
    from tinker_opt.costs.evaluate import CostModel
    from tinker_opt.script.reader import read_script
    from tinker_opt.specs import ClusterSpec

    model = read_script(ROOT / LLAMA2_7B.script).model
    cost = CostModel.from_profile(
        load_profiled_data(llama7b),
        model,
        ClusterSpec(num_nodes=1, devices_per_node=8, memory_limit_mb=57000),
        64,
    )
    link = cost.comm.link("all_reduce", 8, "intra_node")
    assert link.bandwidth_gbs == DEFAULT_LINKS["intra_node"].bandwidth_gbs
    assert any("intra-node" in warning for warning in cost.warnings)


def test_all_failed_rows_is_a_profile_data_error(tmp_path):
    """A folder where every group ran out of memory names the cause."""
    folder = write_tinker_folder(tmp_path, TINY, mbs=(1,), max_npu=1, oom=((1, 0, 1),))
    with pytest.raises(ProfileDataError, match="out of memory"):
        read_tinker_folder(folder)
