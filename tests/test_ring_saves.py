"""The context-parallel ring keeps what Transformer Engine's ring keeps (profile/tp_emulation.py
RingAttentionSaves): q, k, v, the combined output and one fp32 softmax statistic, so a layer at cp
keeps the bytes of the same layer without cp at the same tokens per rank."""

from __future__ import annotations

import dataclasses

from tinker_opt.profile.analytic import trace_block
from tinker_opt.profile.shape import Shape
from tinker_opt.script.reader import read_script

SCRIPT = "tests/fixtures/scripts/pretrain_chatglm3_6b_64k_ptd.sh"


def test_ring_keeps_the_bytes_of_one_attention_call():
    model = read_script(SCRIPT).model
    ring = trace_block(model, "layer", Shape(tp=2, sp=True, cp=8, mbs=1))
    # The same tokens per rank without the ring: seq / 8 on one cp rank.
    local = dataclasses.replace(model, seq_length=model.seq_length // 8)
    plain = trace_block(local, "layer", Shape(tp=2, sp=True, cp=1, mbs=1))
    assert ring.memory.activation_bytes == plain.memory.activation_bytes
    # The steps' outputs (cp of them, [s/cp, b, np/tp * d] at 2 B) are not kept: by hand, 8 steps
    # of 8192 tokens x 16 heads x 128 at 2 B would be 256 MiB more.
    assert ring.memory.activation_bytes < plain.memory.activation_bytes + 8 * 8192 * 16 * 128 * 2


def test_ring_still_runs_every_step_forward_and_backward():
    """The time trace is the ring's: cp flash forward calls and cp backward calls."""
    model = read_script(SCRIPT).model
    ring = trace_block(model, "layer", Shape(tp=2, sp=True, cp=8, mbs=1))
    name = "_scaled_dot_product_flash_attention_for_cpu"
    assert sum(op.name == name for op in ring.fwd_ops) == 8
    assert sum(op.name == name + "_backward" for op in ring.bwd_ops) == 8
