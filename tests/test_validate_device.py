"""benchmarks/validate_device.py's pieces that need no device time: the script it profiles
describes the model it trains, and its optimizer keeps Megatron's 18 bytes per parameter."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def validate():
    spec = importlib.util.spec_from_file_location(
        "validate_device", ROOT / "benchmarks" / "validate_device.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["validate_device"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("validate_device", None)


@pytest.mark.parametrize("plan_name,seq", [("FULL", 4096), ("DRY", 128)])
def test_launch_script_reads_back_as_the_trained_model(validate, tmp_path, plan_name, seq):
    """`tinker-opt profile` reads the generated script as the same ModelSpec the trainer builds,
    with the fused-kernel flags the trainer's kernels come from."""
    from tinker_opt.profile.kernels import script_flags
    from tinker_opt.script.reader import read_script

    plan = getattr(validate, plan_name)
    script = tmp_path / "model.sh"
    script.write_text(validate.launch_script(plan, seq, 2), encoding="utf-8")
    info = read_script(script)
    assert info.model == validate.model_spec(plan, seq)
    assert set(script_flags(info.launch)) == set(validate.FLAGS)
    assert info.train.micro_batch_size == 2 and info.train.strategy.tp == 1


def test_full_plan_is_about_one_billion_parameters(validate):
    """The full plan's model has 1.0 to 1.2 billion parameters."""
    from tinker_opt.profile.shape import Shape
    from tinker_opt.profile.subgraphs import build_block

    model = validate.model_spec(validate.FULL, 2048)
    count = sum(
        build_block(model, b, Shape(), device="meta").param_count
        for b in ("embedding", "final_norm", "head")
    )
    count += model.num_layers * build_block(model, "layer", Shape(), device="meta").param_count
    assert 1.0e9 < count < 1.2e9


def test_mixed_precision_adam_keeps_18_bytes_per_parameter(validate):
    """bf16 weight + fp32 main_grad + fp32 master + two fp32 Adam moments, and the bf16 grad freed."""
    trainer = sys.modules["device_trainer"]  # imported by validate_device.py
    layer = torch.nn.Linear(16, 8, bias=False).to(torch.bfloat16)
    optimizer = trainer.MixedPrecisionAdam(list(layer.parameters()))
    layer(torch.randn(4, 16, dtype=torch.bfloat16)).sum().backward()
    optimizer.step()
    weight = layer.weight
    assert weight.grad is None
    state = optimizer.adam.state[optimizer.master[0]]
    nbytes = sum(
        t.numel() * t.element_size()
        for t in (
            weight,
            weight.main_grad,
            optimizer.master[0],
            state["exp_avg"],
            state["exp_avg_sq"],
        )
    )
    assert nbytes == 18 * weight.numel()
    assert not torch.equal(weight.float(), torch.zeros_like(weight.float()))
