"""costs/deterministic.py: `--deterministic-mode` prices the fused attention's deterministic
backward (DASH's 37.9 % throughput loss), read from the launch and priced end to end by `check`."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tinker_opt.costs.deterministic import (
    DEFAULT_FACTOR,
    THROUGHPUT_LOSS,
    attention_backward_flops,
    deterministic_backward_us,
)
from tinker_opt.costs.inputs import HardwareRates
from tinker_opt.errors import ConfigError
from tinker_opt.hardware import load_hardware
from tinker_opt.specs import StepFlags
from tinker_opt.strategy import Strategy
from tinker_opt.verbs.check import DeviceChoice, run_check

LOGS = Path(__file__).parent / "fixtures" / "logs"


def _model(**extra) -> SimpleNamespace:
    fields = dict(
        num_attention_heads=32,
        kv_channels=128,
        seq_length=4096,
        multi_latent_attention=False,
        use_flash_attn=True,
    )
    return SimpleNamespace(**{**fields, **extra})


def _ctx(deterministic: bool, hardware: str = "h100-80gb", **model) -> SimpleNamespace:
    rates = HardwareRates.of(load_hardware(hardware))
    step = StepFlags(deterministic=deterministic)
    return SimpleNamespace(job=SimpleNamespace(step=step), model=_model(**model), rates=rates)


def test_backward_flops_are_five_causal_score_matmuls_per_local_head():
    """Five matmuls of q x k x head dim per head, halved by the causal mask, split by tp and cp."""
    ctx = _ctx(True)
    s = Strategy(tp=2, cp=2, mbs=1)
    expected = 2 * 5 * 16 * 2048 * 4096 * 128 * 0.5
    assert attention_backward_flops(ctx, s) == pytest.approx(expected)


def test_extra_is_the_backward_time_times_the_throughput_loss():
    """Deterministic: the kernel's time under the description's attention_bwd curve x 0.61; off,
    or without a fused attention kernel (unfused attention is deterministic already): nothing."""
    s = Strategy(tp=1, mbs=1)
    on = _ctx(True)
    flops = attention_backward_flops(on, s)
    assert pytest.approx(1 / (1 - THROUGHPUT_LOSS)) == DEFAULT_FACTOR
    assert on.rates.deterministic_attention_bwd is None  # h100-80gb states none: the default
    assert deterministic_backward_us(on, s) == pytest.approx(
        on.rates.attention_bwd_us(flops) * (DEFAULT_FACTOR - 1)
    )
    assert deterministic_backward_us(on, s) > 0
    assert deterministic_backward_us(_ctx(False), s) == 0.0
    assert deterministic_backward_us(_ctx(True, use_flash_attn=False), s) == 0.0


def test_blackwell_states_no_slowdown_and_the_factor_round_trips(tmp_path):
    """cuDNN >= 9.18.1's deterministic backward on Blackwell costs nothing extra (gb200-nvl72.json
    states 1.0); a description's factor below 1 is refused, and to_dict keeps it."""
    s = Strategy(tp=1, mbs=1)
    assert deterministic_backward_us(_ctx(True, "gb200-nvl72"), s) == 0.0
    spec = load_hardware("gb200-nvl72")
    assert spec.deterministic_attention_bwd == 1.0
    data = {**spec.to_dict(), "deterministic_attention_bwd": 1.3}
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert load_hardware(path).to_dict()["deterministic_attention_bwd"] == 1.3
    path.write_text(json.dumps({**data, "deterministic_attention_bwd": 0.5}), encoding="utf-8")
    with pytest.raises(ConfigError, match="deterministic_attention_bwd >= 1"):
        load_hardware(path)


def _predicted_ms(tmp_path: Path, text: str) -> float:
    folder = LOGS / "mlm-ci-gpt7b-tp4pp1-h100"
    script = tmp_path / "script.sh"
    script.write_text(text, encoding="utf-8")
    choice = DeviceChoice(device="analytic", hardware="h100-80gb")
    result = run_check(folder / "log.txt", str(script), choice)[0]
    return json.loads(json.dumps(result["predicted"]["iteration_time_ms"]))


def test_the_ci_script_pays_for_deterministic_mode(tmp_path):
    """The Megatron CI H100 script runs --deterministic-mode: dropping it shortens the prediction
    (the attention backward of 32 layers x 4 micro-batches)."""
    text = (LOGS / "mlm-ci-gpt7b-tp4pp1-h100" / "script.sh").read_text(encoding="utf-8")
    assert "--deterministic-mode" in text
    as_run = _predicted_ms(tmp_path, text)
    plain = _predicted_ms(tmp_path, text.replace("--deterministic-mode \\\n", ""))
    assert as_run > plain * 1.02
