"""MindSpeed's --swap-attention (costs/swap_terms.py): read from the script, its memory saving
and its exposed copy time priced, no longer warned as unpriced."""

from __future__ import annotations

import dataclasses

import pytest
from model_support import cluster, dense_model, synthetic_profile
from script_support import FIXTURES

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.job import JobOptions
from tinker_opt.costs.swap_terms import swap_attention_bytes, swap_exposed_us
from tinker_opt.hardware import load_hardware
from tinker_opt.script.reader import read_script_text
from tinker_opt.strategy import Strategy


def test_bytes_are_the_attention_modules_tensors():
    """qkv input (split over tp with sp), Q, K, V and the core output, by hand: hidden 1024,
    4 groups of 64 (GQA), tp 2, 2048 tokens, bf16."""
    model = dense_model(hidden=1024, heads=16, groups=4)
    kv = 4 * model.kv_channels
    with_sp = 2048 * (1024 // 2 + (2 * 1024 + 2 * kv) // 2) * 2
    assert swap_attention_bytes(model, 2048, 2, True, 2) == with_sp
    assert swap_attention_bytes(model, 2048, 2, False, 2) == with_sp + 2048 * 512 * 2


def test_copy_hides_behind_compute():
    """A copy shorter than the layer's forward and backward is hidden; a longer one shows its
    excess in each direction."""
    assert swap_exposed_us(25_000, 25.0, 2.0, 4.0) == 0.0  # 25 kB at 25 GB/s: 1 us
    assert swap_exposed_us(250_000, 25.0, 2.0, 4.0) == pytest.approx(8.0 + 6.0)


def _evaluate(job: JobOptions, host_link_gbs: float):
    model = dense_model(num_layers=8, hidden=1024, heads=16, seq=2048)
    profile = synthetic_profile(model, tps=(1,), mbss=(1,))
    hardware = dataclasses.replace(load_hardware("a100-80gb"), host_link_gbs=host_link_gbs)
    cost_model = CostModel.from_profile(
        profile, model, cluster(1, 2), 8, hardware=hardware, job=job
    )
    return cost_model.evaluate(Strategy(tp=1, pp=2, dp=1, mbs=1)), model


@pytest.mark.parametrize("link_gbs", [1e6, 0.05])
def test_memory_falls_and_time_pays_the_exposed_copy(link_gbs):
    """Every stage keeps the attention bytes of each layer and micro-batch in flight fewer; the
    iteration is never faster, and slower only when the link cannot keep up."""
    off, model = _evaluate(JobOptions(), link_gbs)
    on, _ = _evaluate(JobOptions(swap_attention=True), link_gbs)
    per_stage_mb = 4 * swap_attention_bytes(model, 2048, 1, False, 2) / 2**20  # 4 layers a stage
    in_flight = []
    for before, after in zip(off.stages, on.stages, strict=True):
        count = (before.activations_mb - after.activations_mb) / per_stage_mb
        assert count == pytest.approx(round(count)) and count >= 1
        in_flight.append(round(count))
    assert in_flight[0] > in_flight[1]  # 1F1B: the first stage holds more micro-batches
    assert on.iteration_time_ms >= off.iteration_time_ms
    assert (on.iteration_time_ms > off.iteration_time_ms) == (link_gbs < 1)


def test_reader_prices_it_and_stops_warning():
    """The flag reaches the job options and leaves the not-priced warning; --swap-modules, not
    modelled, is named instead."""
    from tinker_opt.verbs.common import job_options

    text = (FIXTURES / "pretrain_llama2_7b_ptd.sh").read_text()
    text = text.replace("--use-flash-attn", "--use-flash-attn --swap-attention --swap-modules x")
    info = read_script_text(text)
    assert info.train.swap_attention and job_options(info).swap_attention
    warning = " ".join(w for w in info.warnings if "does not include" in w)
    assert "--swap-attention" not in warning and "--swap-modules" in warning
