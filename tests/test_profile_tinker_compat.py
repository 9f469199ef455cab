"""Reading Tinker's profiled_data.csv folders."""

from __future__ import annotations

import json

import pytest

from tinker_opt.errors import ProfileDataError
from tinker_opt.profile.store import load_profiled_data
from tinker_opt.profile.tinker_compat import parse_config, read_tinker_folder

HEADER = "config,block_name,forward-compute,backward_compute,input_size,output_size,weights,activations,fwd_reserved,bwd_reserved"
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
    (folder / "profiled_data.csv").write_text(f"{HEADER}\n{GROUP_TP1}\n\n{GROUP_TP2}\n", encoding="utf-8")
    (folder / "model_info_seq4096.json").write_text(
        json.dumps({"seq_length": 4096, "fp16": False, "bf16": True, "num_layers": 32}), encoding="utf-8")
    (folder / "VERSION_1.1.json").write_text(json.dumps({"max_npu": 8}), encoding="utf-8")
    (folder / "p2p_intra_node.csv").write_text("1,16,256\n10,20,25\n", encoding="utf-8")
    return folder


def test_parse_config_keeps_underscores_in_the_name():
    """The model name may hold underscores; the strategy suffix is parsed from the right."""
    assert parse_config("my_model_13b_tp4_sp1_ep2_mbs8_algo0") == {
        "prefix": "my_model_13b", "tp": 4, "sp": 1, "ep": 2, "mbs": 8, "algo": 0}


def test_blocks_are_mapped_and_converted(tinker_folder):
    """Block names map to ours, MiB become bytes, times stay microseconds."""
    blocks = read_tinker_folder(tinker_folder).blocks.set_index(["block", "tp", "mbs"])
    layer = blocks.loc[("layer", 1, 1)]
    assert layer["activation_bytes"] == round(300.25 * 2**20)
    assert layer["weight_bytes"] == 386 * 2**20 and layer["param_count"] == 386 * 2**20 // 2
    assert layer["fwd_us"] == 4000 and layer["transient_bytes"] == 60 * 2**20
    assert set(blocks.index.get_level_values("block")) == {"embedding", "layer", "final_norm", "head"}


def test_expert_parallel_rows_get_etp_equal_tp(tinker_folder):
    """A Tinker row with ep > 1 has Megatron's default expert tensor parallel size (tp)."""
    blocks = read_tinker_folder(tinker_folder).blocks
    row = blocks[(blocks["block"] == "layer") & (blocks["tp"] == 2)].iloc[0]
    assert (row["ep"], row["etp"], row["sp"], row["cp"]) == (2, 2, 1, 1)


def test_p2p_becomes_send_recv_rows(tinker_folder):
    """p2p_intra_node.csv: 16 MB at 20 GB/s is 16 MiB / 20e9 B/s in microseconds."""
    comm = read_tinker_folder(tinker_folder).comm
    row = comm[comm["bytes"] == 16 * 2**20].iloc[0]
    assert (row["op"], row["group_size"], row["scope"]) == ("send_recv", 2, "intra_node")
    assert row["time_us"] == pytest.approx(16 * 2**20 / 20e9 * 1e6, rel=1e-6)


def test_store_dispatches_to_tinker_reader(tinker_folder):
    """load_profiled_data recognises a Tinker folder and reads its model info."""
    data = load_profiled_data(tinker_folder)
    assert data.meta.source == "tinker" and data.meta.extra["seq_length"] == 4096 and len(data.blocks) == 6


def test_bad_config_is_a_profile_data_error(tmp_path):
    """A config string without the strategy suffix names the expected pattern."""
    (tmp_path / "profiled_data.csv").write_text(f"{HEADER}\nllama_7b,embedding,1,1,1,1,1,1,1,1\n", encoding="utf-8")
    with pytest.raises(ProfileDataError, match="tp<T>"):
        read_tinker_folder(tmp_path)
