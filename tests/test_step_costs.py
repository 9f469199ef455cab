"""costs/step_costs.py: the optimizer step's passes beside Adam, its scalar all-reduces and the
data loader's batch per micro-batch; read from the launch (script/train_args.py step_flags) and
priced end to end by `check`."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tinker_opt.costs.step_costs import (
    BATCH_TOKEN_BYTES,
    batch_load_us,
    step_fixed_us,
    step_kernels_us,
)
from tinker_opt.specs import StepFlags
from tinker_opt.strategy import Strategy
from tinker_opt.verbs.check import DeviceChoice, run_check

LOGS = Path(__file__).parent / "fixtures" / "logs"
BW = 1000.0  # GB/s: 1e6 B per us
HOST_US = 7.0


class _Comm:
    """Every collective 10 us, whatever its size; counts the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, float]] = []

    def time_us(self, op, size, scope, nbytes):
        self.calls.append((op, size, nbytes))
        return 10.0


def _ctx(step: StepFlags, precision: str = "bf16", seq: int = 1024) -> SimpleNamespace:
    return SimpleNamespace(
        job=SimpleNamespace(step=step),
        model=SimpleNamespace(precision=precision, seq_length=seq),
        grad_bytes=4,
        bpe=2,
        mem_bw_gbs=BW,
        host_link_gbs=BW,
        rates=SimpleNamespace(host_op_us=HOST_US),
        comm=_Comm(),
        scope=lambda stride, size: "scope",
    )


def test_step_passes_per_parameter():
    """Zero-grad writes 4 B per local parameter; clipping reads the shard's grads (4 B; the scale
    pass is left out); fp16 unscales (8 B); the zero count reads 4 B of the shard; the params norm 2 B of
    every local parameter."""
    local, shard = 1e6, 2.5e5
    bare = StepFlags(clip_grad=False)
    assert step_kernels_us(_ctx(bare), local, shard) == pytest.approx(local * 4 / 1e6)
    clip = StepFlags()
    assert step_kernels_us(_ctx(clip), local, shard) == pytest.approx((local * 4 + shard * 4) / 1e6)
    every = StepFlags(log_params_norm=True, log_num_zeros_in_grad=True)
    expected = local * (4 + 2) + shard * (4 + 4 + 8)
    assert step_kernels_us(_ctx(every, "fp16"), local, shard) == pytest.approx(expected / 1e6)


def test_step_passes_add_up_over_layers():
    """Linear in the parameters, so the solvers' per-layer tails sum to the stage's."""
    ctx = _ctx(StepFlags(log_params_norm=True))
    whole = step_kernels_us(ctx, 3e6, 1e6)
    parts = step_kernels_us(ctx, 1e6, 4e5) + step_kernels_us(ctx, 2e6, 6e5)
    assert whole == pytest.approx(parts)


def test_step_constant_counts_reductions_and_launches():
    """Clipping alone: one all-reduce (10 us) + its host read (7 us), two exposed launches
    (zero, norm: 14 us); the group holds the model's ranks and, with the distributed
    optimizer, the data-parallel ones."""
    s = Strategy(tp=2, pp=2, dp=2, mbs=1, zero=1)
    ctx = _ctx(StepFlags())
    assert step_fixed_us(ctx, s) == pytest.approx(10 + 7 + 2 * 7)
    assert ctx.comm.calls == [("all_reduce", 8, 4.0)]
    ctx = _ctx(StepFlags(clip_grad=False))
    assert step_fixed_us(ctx, s.replace(zero=0)) == pytest.approx(7)  # zero_grad's launch
    assert ctx.comm.calls == []
    every = _ctx(StepFlags(log_params_norm=True, log_num_zeros_in_grad=True), "fp16")
    assert step_fixed_us(every, s.replace(zero=0)) == pytest.approx(4 * 17 + 5 * 7)
    assert {call[1] for call in every.comm.calls} == {4}


def test_batch_load_on_first_and_last_stages_only():
    """tp 1: the copy of 28 B per token, plus seq x seq bytes per sample with the mask; a middle
    stage loads nothing; tp 2 adds the broadcasts (first stage: tokens, position ids, mask)."""
    seq, mbs = 1024, 2
    tokens = seq * mbs
    s = Strategy(tp=1, pp=2, dp=1, mbs=mbs)
    assert batch_load_us(_ctx(StepFlags(), seq=seq), s, True, True) == 0.0  # no launch read
    plain = _ctx(StepFlags(load_batch=True), seq=seq)
    assert batch_load_us(plain, s, False, False) == 0.0
    assert batch_load_us(plain, s, True, False) == pytest.approx(tokens * BATCH_TOKEN_BYTES / 1e6)
    masked = _ctx(StepFlags(load_batch=True, batch_attention_mask=True), seq=seq)
    copy = (tokens * BATCH_TOKEN_BYTES + tokens * seq) / 1e6
    assert batch_load_us(masked, s, True, True) == pytest.approx(copy)
    assert batch_load_us(masked, s.replace(tp=2), True, False) == pytest.approx(copy + 3 * 10)
    assert batch_load_us(masked, s.replace(tp=2), True, True) == pytest.approx(copy + 5 * 10)


def _predicted(tmp_path: Path, script_text: str) -> dict:
    script = tmp_path / "script.sh"
    script.write_text(script_text, encoding="utf-8")
    folder = LOGS / "mlm-ci-gpt7b-tp4pp1-h100"
    result = run_check(
        folder / "log.txt", str(script), DeviceChoice(device="analytic", hardware="h100-80gb")
    )[0]
    return json.loads(json.dumps(result["predicted"]["time_breakdown_ms"]))


def test_logging_flags_and_the_mask_priced_end_to_end(tmp_path):
    """The H100 CI script logs the params norm and the zero count and builds the mask: dropping
    the logging flags shortens the optimizer part; turning the mask off shortens the compute."""
    text = (LOGS / "mlm-ci-gpt7b-tp4pp1-h100" / "script.sh").read_text(encoding="utf-8")
    assert "--log-params-norm" in text and "--log-num-zeros-in-grad" in text
    as_run = _predicted(tmp_path, text)
    quiet = text.replace("--log-params-norm \\\n", "").replace("--log-num-zeros-in-grad \\\n", "")
    assert _predicted(tmp_path, quiet)["optimizer_ms"] < as_run["optimizer_ms"]
    no_mask = text.replace(
        "--bf16 \\\n", "--bf16 \\\n    --no-create-attention-mask-in-dataloader \\\n"
    )
    assert _predicted(tmp_path, no_mask)["compute_ms"] < as_run["compute_ms"]
