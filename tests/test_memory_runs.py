"""benchmarks/data/memory_runs.json: its rows' launch scripts read back with the recipe settings the
rows state (FP8 parameter gather, the optimizer dtypes of NeMo's Apex optimizer, Nemotron-4's
layers), so the memory check of validate_published.py sees what ran."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from published_flags import FP8_FLAGS, fp8_flags  # noqa: E402
from published_runs import launch_script, load_runs  # noqa: E402

from tinker_opt.script.reader import read_script_text  # noqa: E402

RUNS = {run.run_id: run for run in load_runs(ROOT / "benchmarks/data/memory_runs.json")}


def _read(run_id: str):
    return read_script_text(launch_script(RUNS[run_id]), f"{run_id}.sh")


def test_fp8_param_gather_is_written_only_where_the_row_says_so():
    """A row with `fp8_param_gather: false` loses that one flag; the rest of the recipe stays."""
    assert fp8_flags({}) == FP8_FLAGS
    kept = fp8_flags({"fp8_param_gather": False})
    assert "--fp8-param-gather" not in kept
    assert len(kept) == len(FP8_FLAGS) - 1


def test_dgxc_fp8_rows_gather_fp8_parameters():
    """configure.sh sets +model.fp8_params for FP8 (dgxc-benchmarking llama3.1 / nemotron)."""
    info = _read("dgxc2409_llama31_8b_fp8_8gpu_cp2")
    assert info.model.is_fp8 and info.model.fp8_param_gather
    assert not _read("dgxc2409_llama31_8b_bf16_8gpu_cp2").model.is_fp8


def test_apex_optimizer_dtypes_reach_the_reader():
    """405B BF16: Apex's 16-bit master remainders (2 B) and fp32 gradients; Nemotron-4: bf16
    gradients and moments (the configs' dtype bf16, grad_sync_dtype bf16)."""
    llama = _read("dgxc2409_llama31_405b_bf16_576gpu_cp2").train.optimizer_precision
    assert (llama.grad_bytes, llama.state_bytes) == (4, 2 + 4 + 4)
    nemotron = _read("dgxc2411_nemotron4_340b_bf16_128gpu").train.optimizer_precision
    assert (nemotron.grad_bytes, nemotron.state_bytes) == (2, 2 + 2 + 2)


def test_nemotron_rows_read_as_nemotron_4():
    """LayerNorm, not gated, rotary, no biases, untied, no dropout, 8 query groups, selective."""
    info = _read("dgxc_nemotron4_15b_bf16_16gpu")
    m = info.model
    assert (m.normalization, m.swiglu, m.position_embedding_type) == ("LayerNorm", False, "rope")
    assert not m.add_bias_linear and m.untie_embeddings_and_output_weights
    assert (m.attention_dropout, m.hidden_dropout, m.num_query_groups) == (0.0, 0.0, 8)
    assert info.train.strategy.recompute == "selective"


def test_a_row_whose_source_says_it_ran_counts_as_ran():
    """`measured.ran` without a time: ran (the memory check holds it to its device), no time."""
    run = RUNS["mindspeed_mixtral_8x22b_32k_64npu_tp8_pp4_cp2"]
    assert run.ran and run.iteration_time_s is None
    assert RUNS["dgxc2409_llama31_8b_bf16_8gpu_cp2"].ran


def test_validator_passes_reuse_fp32_param():
    """MindSpeed's --reuse-fp32-param reaches the cost model's job options, as simulate's do."""
    from validate_published import read_run

    run = RUNS["mindspeed_mixtral_8x22b_32k_64npu_tp8_pp4_cp2"]
    _, strategy, _, job = read_run(run, launch_script(run))
    assert job.reuse_fp32_param
    assert (strategy.tp, strategy.pp, strategy.cp, strategy.vpp) == (8, 4, 2, 7)
