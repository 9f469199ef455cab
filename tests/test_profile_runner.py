"""run_profile: the profiled-data folder, resume, out-of-memory and failure handling."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from tests.profile_support import llama_model
from tinker_opt.errors import ConfigError, ProfileDataError
from tinker_opt.profile import rows as row_module
from tinker_opt.profile.runner import MeasureSettings, default_profile_dir, run_profile
from tinker_opt.profile.store import load_profiled_data
from tinker_opt.specs import TrainSpec
from tinker_opt.strategy import Strategy

SMALL = dict(device="cpu", max_npu=2, max_mbs=2, comm="skip", warmup=1, repeats=5)


def tiny_model():
    return llama_model(seq=32, hidden=32, heads=4, groups=2, ffn=64, vocab=256)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile")
    run_profile(tiny_model(), MeasureSettings(**SMALL), out)
    return out


def test_folder_is_loadable_with_every_row_ok(profiled):
    """blocks.csv holds 4 blocks x 3 (tp, sp) x 2 mbs rows, all ok, and the model round-trips."""
    data = load_profiled_data(profiled)
    assert len(data.blocks) == 4 * 3 * 2
    assert data.model == tiny_model()
    assert (profiled / "profile.log").read_text().count("fwd ") == 24


def test_blocks_csv_holds_integers(profiled):
    """Microseconds and bytes are written as integers."""
    text = (profiled / "blocks.csv").read_text().splitlines()[1]
    assert not re.search(r"\d\.\d", text)


def test_resume_keeps_measured_rows(profiled, tmp_path):
    """A rerun keeps the rows already there and measures only the missing ones."""
    frame = pd.read_csv(profiled / "blocks.csv")
    frame.loc[0, "fwd_us"] = 123456789
    frame.drop(index=1).to_csv(tmp_path / "blocks.csv", index=False)
    (tmp_path / "meta.json").write_text((profiled / "meta.json").read_text())
    lines = []
    run_profile(tiny_model(), MeasureSettings(**SMALL), tmp_path, log=lines.append)
    again = pd.read_csv(tmp_path / "blocks.csv")
    assert 123456789 in again["fwd_us"].tolist() and len(again) == len(frame)
    assert sum(" fwd " in line for line in lines) == 1


def test_resume_refuses_another_model(profiled):
    """Profiling a different model into a used folder is a ProfileDataError."""
    with pytest.raises(ProfileDataError, match="different model"):
        run_profile(llama_model(seq=64), MeasureSettings(**SMALL), profiled)


def test_memory_limit_marks_larger_rows_oom(profiled, tmp_path):
    """Rows predicted above the memory limit get status oom (extrapolated from the smaller mbs)."""
    rows = pd.read_csv(profiled / "blocks.csv").set_index(["block", "tp", "sp", "mbs"])
    head = rows.loc[("head", 1, 0, 1)]
    per_batch = head[["activation_bytes", "transient_bytes", "input_bytes", "output_bytes"]].sum()
    limit_mb = (head["weight_bytes"] + 1.5 * per_batch) / 2**20  # above mbs 1, below mbs 2
    run_profile(
        tiny_model(),
        MeasureSettings(**{**SMALL, "memory_limit_mb": limit_mb, "max_npu": 1}),
        tmp_path,
    )
    frame = pd.read_csv(tmp_path / "blocks.csv").set_index(["block", "mbs"])
    assert frame.loc[("head", 2), "status"] == "oom" and frame.loc[("head", 1), "status"] == "ok"


def test_failed_row_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    """A block that raises gets its error in `status`; the other rows are measured."""
    real = row_module.measure_point

    def flaky(model, point, device, settings, *rest):
        if point.block == "final_norm":
            raise ValueError("boom")
        return real(model, point, device, settings, *rest)

    monkeypatch.setattr(row_module, "measure_point", flaky)
    run_profile(tiny_model(), MeasureSettings(**{**SMALL, "max_npu": 1, "max_mbs": 1}), tmp_path)
    frame = pd.read_csv(tmp_path / "blocks.csv").set_index("block")
    assert (
        frame.loc["final_norm", "status"] == "error: ValueError: boom"
        and frame.loc["head", "status"] == "ok"
    )


def test_hardware_file_gives_comm_table(tmp_path):
    """With a hardware description, comm.csv is computed from it (intra- and inter-node)."""
    settings = MeasureSettings(**{**SMALL, "max_npu": 1, "max_mbs": 1, "hardware": "a100-80gb"})
    data = load_profiled_data(run_profile(tiny_model(), settings, tmp_path))
    assert (
        set(data.comm["scope"]) == {"intra_node", "inter_node"}
        and data.meta.comm_source == "hardware a100-80gb"
    )


def test_default_profile_dir_follows_tinkers_naming(tmp_path):
    """profiled-data-<name>-<size>-<yymmdd-HHMMSS> under the root."""
    path = default_profile_dir("llama2", "7b", root=tmp_path)
    assert path.parent == tmp_path and re.fullmatch(
        r"profiled-data-llama2-7b-\d{6}-\d{6}", path.name
    )


def test_fewer_than_five_repeats_is_rejected():
    """repeats < 5 is a ConfigError."""
    with pytest.raises(ConfigError, match="at least 5"):
        MeasureSettings(**{**SMALL, "repeats": 3})


def _fake_row(block, tp, mbs, nbytes):
    row = {
        "block": block,
        "tp": tp,
        "sp": 0,
        "cp": 1,
        "ep": 1,
        "etp": 1,
        "mbs": mbs,
        "status": "ok",
        "weight_bytes": 100,
        "activation_bytes": nbytes,
        "transient_bytes": 0,
        "input_bytes": 0,
        "output_bytes": 0,
    }
    return row_module.row_key(row), row


def test_memory_prediction_from_smaller_mbs_and_larger_tp():
    """mbs 4 doubles the activations of mbs 2; tp 1 doubles everything of tp 2."""
    from tinker_opt.profile.shape import Shape
    from tinker_opt.profile.space import ProfilePoint

    rows = dict([_fake_row("layer", 2, 2, 1000)])
    assert row_module.predicted_bytes(ProfilePoint("layer", Shape(tp=2, mbs=4)), rows) == 100 + 2000
    assert row_module.predicted_bytes(ProfilePoint("layer", Shape(tp=1, mbs=2)), rows) == 2 * 1100
    assert row_module.predicted_bytes(ProfilePoint("head", Shape(tp=1, mbs=2)), rows) is None


def test_limits_keep_the_scripts_ep_above_max_ep():
    """The settings' max_ep bounds ep, and the script's own ep (16) is added to the profile space."""
    train = TrainSpec(
        micro_batch_size=1,
        global_batch_size=8,
        nnodes=2,
        nproc_per_node=8,
        strategy=Strategy(tp=1, pp=1, dp=16, ep=16, etp=1),
    )
    limits = MeasureSettings(**SMALL, max_ep=4).limits(train)
    assert limits.max_ep == 4 and limits.extra_ep == (16,)


def test_limits_add_the_scripts_tp_above_max_npu():
    """A script running tp 16 on nodes of 8 gets tp 16 profiled (tensor parallelism across nodes)."""
    train = TrainSpec(
        micro_batch_size=1,
        global_batch_size=8,
        nnodes=2,
        nproc_per_node=8,
        strategy=Strategy(tp=16, pp=1, dp=1),
    )
    assert MeasureSettings(**{**SMALL, "max_npu": 8}).limits(train).extra_tp == (16,)


def test_max_ep_below_one_is_an_error():
    """max_ep = 0 is a ConfigError."""
    with pytest.raises(ConfigError, match="max_ep"):
        MeasureSettings(**SMALL, max_ep=0)


def test_script_cp_brings_its_power_of_two_divisors():
    """A script with cp 8 gets cp 2, 4 and 8 profiled, so fewer nodes can still split the context."""
    train = TrainSpec(
        micro_batch_size=1,
        global_batch_size=8,
        nnodes=2,
        nproc_per_node=8,
        strategy=Strategy(tp=1, dp=2, cp=8, cp_algo="ulysses_cp_algo"),
    )
    assert MeasureSettings(**SMALL).limits(train).prof_cp == (2, 4, 8)
