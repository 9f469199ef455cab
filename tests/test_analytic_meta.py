"""The analytic device traces on the meta device: the same ops and bytes as fake CPU tensors."""

from __future__ import annotations

import pytest
import torch

from tests.profile_support import mla_model
from tinker_opt.hardware import load_hardware
from tinker_opt.profile import analytic
from tinker_opt.profile.analytic import trace_block
from tinker_opt.profile.cpu_on_meta import CpuOnMeta
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.space import SpaceLimits, profile_space
from tinker_opt.script.reader import read_script

SCRIPTS = "tests/fixtures/scripts"
CASES = [
    # script, block, shape: GQA flash attention, the materialised (non-flash) path with learned
    # positions, MLA with grouped experts, sequential experts, the context-parallel ring
    ("pretrain_llama2_70b_4k_ptd.sh", "layer", Shape(tp=8, sp=True, mbs=1)),
    ("pretrain_llama2_70b_4k_ptd.sh", "head", Shape(tp=8, sp=True, mbs=2)),
    ("train_gpt3_175b_distributed.sh", "layer", Shape(tp=8, mbs=1)),
    ("train_gpt3_175b_distributed.sh", "embedding", Shape(tp=8, sp=True, mbs=1)),
    ("pretrain_deepseek3_671b_4k_ptd.sh", "layer.moe", Shape(tp=8, sp=True, ep=32, etp=1)),
    ("pretrain_deepseek3_671b_4k_ptd.sh", "layer.dense", Shape(tp=8, sp=True, mbs=1)),
    ("pretrain_mixtral_8x7b_ptd.sh", "layer", Shape(tp=8, sp=True, ep=2, etp=8, mbs=1)),
    ("pretrain_chatglm3_6b_64k_ptd.sh", "layer", Shape(tp=2, sp=True, cp=8, mbs=1)),
]


@pytest.mark.parametrize(("script", "block", "shape"), CASES)
def test_meta_trace_equals_the_fake_cpu_trace(script, block, shape):
    """Every traced op (name, FLOPs, bytes, storages, modules) and every byte count are equal."""
    model = read_script(f"{SCRIPTS}/{script}").model
    meta = trace_block(model, block, shape)
    fake = trace_block(model, block, shape, device="fake-cpu")
    assert meta.memory == fake.memory
    assert meta.fwd_ops == fake.fwd_ops
    assert meta.bwd_ops == fake.bwd_ops
    assert meta.core_ops == fake.core_ops
    assert any(op.flops for op in meta.core_ops) == block.startswith("layer")  # core attention


def test_meta_attention_takes_the_cpu_flash_kernel():
    """On meta tensors the attention runs the CPU's flash kernel, not the meta device's math path."""
    model = read_script(f"{SCRIPTS}/pretrain_llama2_70b_4k_ptd.sh").model
    names = {op.name for op in trace_block(model, "layer", Shape(tp=8, sp=True)).fwd_ops}
    assert "_scaled_dot_product_flash_attention_for_cpu" in names
    assert "_safe_softmax" not in names


def test_worker_processes_trace_the_same_rows(monkeypatch):
    """Tracing in forked worker processes gives the serial trace of every point, in order."""
    monkeypatch.setattr(analytic, "MIN_POINTS_PER_WORKER", 2)
    model = mla_model(moe=True)
    points = profile_space(model, SpaceLimits(max_npu=2, max_mbs=1, prof_ep=(8,)))
    assert len(points) >= 4  # two workers
    assert analytic.trace_space(model, points, workers=2) == analytic.trace_space(model, points)


def test_rows_timed_in_the_workers_equal_the_rows_of_the_traces(monkeypatch):
    """space_rows (each worker times its own rows) gives blocks_frame of the serial traces."""
    monkeypatch.setattr(analytic, "MIN_POINTS_PER_WORKER", 2)
    model = mla_model(moe=True)
    points = profile_space(model, SpaceLimits(max_npu=2, max_mbs=1, prof_ep=(8,)))
    hardware = load_hardware("910b")
    rows = analytic.space_rows(model, points, hardware, workers=2)
    assert rows.equals(analytic.blocks_frame(analytic.trace_space(model, points), hardware))


def test_meta_memo_remakes_new_tensors_and_runs_views():
    """A memoised op gives a new tensor like the kernel's; a view still shares its input's storage."""
    with CpuOnMeta():
        x = torch.empty(4, 6, device="meta", dtype=torch.bfloat16)
        first, again = x * 2, x * 2  # the second comes from the memo
        views = [x.t(), x.t()]
    assert (again.shape, again.stride(), again.dtype) == (first.shape, first.stride(), first.dtype)
    assert again.untyped_storage().nbytes() == first.untyped_storage().nbytes() == 48
    assert again.untyped_storage()._cdata != first.untyped_storage()._cdata
    assert all(v.untyped_storage()._cdata == x.untyped_storage()._cdata for v in views)
