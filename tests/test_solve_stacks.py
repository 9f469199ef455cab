"""The layer-stack interface (solve/stacks.py): one place chooses the stack, and the two stacks
agree where both apply (the mixed stack's range tables are exact for a uniform stack too)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from model_support import cluster, dense_model, moe_model, synthetic_profile

from tinker_opt.costs.coefficients import Memo
from tinker_opt.costs.evaluate import CostModel
from tinker_opt.solve.form_split import feasible_under_caps, form_splits
from tinker_opt.solve.stacks import MixedStack, UniformStack, stack_of
from tinker_opt.strategy import Strategy

SOLVE = Path(__file__).resolve().parents[1] / "tinker_opt" / "solve"
DENSE = dense_model(num_layers=8, hidden=512, heads=8, seq=1024)
DENSE_PROFILE = synthetic_profile(DENSE, tps=(1, 2), cps=(1,), mbss=(1, 2))


def _fresh(c):
    """The same coefficients with an empty memo, so two stacks share no cached value."""
    return dataclasses.replace(c, memo=Memo())


def test_stack_of_chooses_by_layer_kinds():
    """A dense model is a uniform stack; a model with dense and MoE layers is a mixed one."""
    outer = Strategy(tp=1, pp=2, dp=4, mbs=1)
    dense = CostModel.from_profile(DENSE_PROFILE, DENSE, cluster(1, 8, 60000), 32)
    assert isinstance(stack_of(dense.coefficients(outer)), UniformStack)
    mixed_model = moe_model(num_layers=8, hidden=256, heads=4, seq=256, experts=4, first_dense=1)
    mixed_profile = synthetic_profile(mixed_model, tps=(1,), cps=(1,), mbss=(1,), eps=(1,))
    mixed = CostModel.from_profile(mixed_profile, mixed_model, cluster(1, 8, 60000), 32)
    assert isinstance(stack_of(mixed.coefficients(outer)), MixedStack)


def test_only_stacks_asks_for_the_stack_kind():
    """No solver module branches on `homogeneous`: stacks.stack_of is the one place."""
    readers = sorted(
        path.name
        for path in SOLVE.glob("*.py")
        if re.search(r"\.homogeneous\b", path.read_text(encoding="utf-8"))
    )
    assert readers == ["stacks.py"]


@st.composite
def uniform_configurations(draw):
    """An outer configuration of an 8-layer dense model on 8 devices (virtual pipeline too),
    with a random memory limit."""
    pp = draw(st.sampled_from([1, 2, 4]))
    tp = draw(st.sampled_from([1, 2]))
    recompute = draw(st.sampled_from(["none", "selective", "full", "full-uniform"]))
    memory_mb = draw(st.integers(150, 1200))
    cost_model = CostModel.from_profile(DENSE_PROFILE, DENSE, cluster(1, 8, memory_mb), 32)
    full = recompute.startswith("full")
    method = ("uniform" if recompute == "full-uniform" else "block") if full else None
    vpp = draw(st.sampled_from([1, 2])) if pp > 1 else 1
    mbs = draw(st.sampled_from([1, 2]))
    outer = Strategy(
        tp=tp,
        pp=pp,
        dp=8 // (tp * pp),
        sp=tp > 1,
        vpp=vpp,
        mbs=mbs,
        zero=draw(st.integers(0, 1)),
        recompute="full" if full else recompute,
        recompute_method=method,
    )
    return cost_model.coefficients(outer)


@settings(max_examples=40, deadline=None)
@given(uniform_configurations())
def test_uniform_and_mixed_stacks_agree_on_a_uniform_stack(c):
    """Both implementations give the same optimum and feasibility, and valid bounds."""
    uniform, mixed = UniformStack(_fresh(c)), MixedStack(_fresh(c))
    split_u, split_m = uniform.best_split(), mixed.best_split()
    assert uniform.is_feasible() == mixed.is_feasible() == (split_u is not None)
    assert (split_m is None) == (split_u is None)
    if split_u is None:
        return
    assert split_u.time_ns_x_v == split_m.time_ns_x_v
    for stack in (uniform, mixed):
        assert stack.lower_bound_x_v(tight=False) <= split_u.time_ns_x_v
        assert stack.lower_bound_x_v() <= split_u.time_ns_x_v
        assert stack.horizon_x_v() >= split_u.time_ns_x_v


@settings(max_examples=200, deadline=None)
@given(
    st.integers(3, 40),
    st.lists(st.integers(-1, 20), min_size=2, max_size=8),
    st.sampled_from(["first_last", "even"]),
)
def test_form_caps_closed_form_equals_the_rows(num_layers, caps, form):
    """feasible_under_caps (closed forms of the even and first/last layer forms) says exactly
    whether some row of form_splits lies within the caps."""
    if (form == "first_last" and len(caps) < 3) or len(caps) > num_layers:
        return
    caps = np.array(caps, dtype=np.int64)
    rows = form_splits(num_layers, len(caps), form)
    expected = bool((rows <= caps[None, :]).all(axis=1).any())
    assert feasible_under_caps(caps, num_layers, form) == expected
    assert feasible_under_caps(np.stack([caps, np.zeros_like(caps)]), num_layers, form) == expected
