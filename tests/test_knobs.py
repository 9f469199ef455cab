"""The knob registry: one declaration that the reader, the rules, the space and the writer share."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from script_support import FIXTURES

from tinker_opt.choices import Recompute
from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.errors import StrategyError
from tinker_opt.knobs import (
    KNOBS,
    LAYOUT_KNOBS,
    MEGATRON,
    KnobContext,
    ModelFacts,
    excluded_pairs,
    knob_message,
    read_switches,
)
from tinker_opt.script import flags, versions
from tinker_opt.script.reader import read_script_text
from tinker_opt.solve.space import SearchSpace, overlap_choices
from tinker_opt.strategy import OVERLAP_KEYS, Strategy


def test_registry_covers_the_overlap_keys_and_their_flags():
    """Every overlap key has one declaration, every spelling is a `strategy` flag of the flag
    table (`strategy, not priced` for an unpriced knob), and the version table holds each
    spelling's versions from the declaration."""
    assert tuple(KNOBS) == OVERLAP_KEYS
    for knob in KNOBS.values():
        for spelling in knob.spellings:
            treatment = "strategy" if knob.priced else "strategy, not priced"
            assert flags.BY_NAME[spelling.flag].treatment == treatment
            assert versions.FLAG_SINCE[spelling.flag] == spelling.since
    assert versions.FLAG_UNTIL["--use-mc2"] == {versions.MINDSPEED: (2, 2, 0)}


def test_layout_knobs_are_strategy_flags_with_their_versions_from_the_registry():
    """tp, pp, cp, ep, etp, sp and mbs: each flag is a `strategy` flag of the flag table and the
    version table holds the declaration's versions (no row where every version has the flag)."""
    assert [knob.key for knob in LAYOUT_KNOBS] == ["pp", "tp", "cp", "ep", "etp", "sp", "mbs"]
    for knob in LAYOUT_KNOBS:
        assert flags.BY_NAME[knob.flag].treatment == "strategy"
        assert versions.FLAG_SINCE.get(knob.flag, {}) == knob.spelling.since
    assert versions.FLAG_SINCE["--context-parallel-size"] == {
        "mindspeed": (0, 9, 3),
        "megatron": (0, 5),
    }


def test_layout_sizes_are_read_and_written_through_their_flags():
    """The reader takes each size from its registry flag and the writer writes it back there."""
    text = (FIXTURES / "pretrain_llama2_7b_ptd.sh").read_text()
    assert read_script_text(text).train.strategy.mbs != 2
    target = Strategy(tp=4, pp=2, dp=1, mbs=2, sp=True)
    written = apply_strategy(text, target, nnodes=1, nproc_per_node=8).text
    got = read_script_text(written).train.strategy
    assert (got.tp, got.pp, got.dp, got.mbs, got.sp) == (4, 2, 1, 2, True)


def test_moe_overlap_and_mc2_exclude_each_other_in_the_rules_too():
    """The rules refuse what the space never produces: the MoE all-to-all overlap with MC2
    (MindSpeed's moe_alltoall_overlap incompatible_check use_ascend_mc2); each alone is accepted."""
    both = Strategy(tp=2, sp=True, dp=4, ep=2, overlap_moe_comm=True, tp_comm_overlap=True)
    assert excluded_pairs() == [
        ("moe_shared_expert_overlap", "overlap_moe_comm"),
        ("overlap_moe_comm", "tp_comm_overlap"),
    ]
    message = knob_message(both, is_moe=True)
    assert message is not None and "exclude each other" in message
    assert knob_message(both.replace(tp_comm_overlap=False), is_moe=True) is None
    assert knob_message(both.replace(overlap_moe_comm=False), is_moe=True) is None


def _strategy(tp, sp, ep, zero, switches):
    return Strategy(tp=tp, sp=sp and tp > 1, dp=4, ep=ep, zero=zero, **switches)


@given(
    tp=st.sampled_from([1, 2, 4]),
    sp=st.booleans(),
    ep=st.sampled_from([1, 2]),
    zero=st.sampled_from([0, 1, 3]),
    is_moe=st.booleans(),
    allowed=st.sets(st.sampled_from(OVERLAP_KEYS)),
)
def test_every_search_choice_passes_the_rules(tp, sp, ep, zero, is_moe, allowed):
    """What the search tries, the rules accept; a knob that does not exist stays None there and in
    what the reader reads; a knob on in the search is accepted by the framework."""
    base = _strategy(tp, sp, ep, zero, {})
    context = KnobContext.of(base, is_moe)
    choices = overlap_choices(base, is_moe, tuple(sorted(allowed)))
    assert choices and len({tuple(c.items()) for c in choices}) == len(choices)
    read = read_switches(lambda flag: True, context)
    for switches in choices:
        assert knob_message(base.replace(**switches), is_moe) is None, switches
        for key, knob in KNOBS.items():
            assert (read[key] is None) == (not knob.exists(context))
            assert (switches[key] is None) == (not knob.exists(context) or not knob.priced)
            assert not switches[key] or key in allowed


@pytest.mark.parametrize("is_moe", [False, True])
def test_rules_accept_exactly_the_valid_switch_settings(is_moe):
    """Over every on/off setting of the four switches at a tp 2 + sp, ep 2, zero 1 layout, the
    rules refuse a setting exactly when a declaration says so (accepts, requires, excludes)."""
    base = _strategy(2, True, 2, 1, {})
    context = KnobContext.of(base, is_moe)
    for values in itertools.product((False, True), repeat=len(KNOBS)):
        switches = dict(zip(KNOBS, values, strict=True))
        on = {key for key, value in switches.items() if value}
        bad = (
            any(not KNOBS[key].accepts(context) for key in on)
            or any(KNOBS[k].refusal and KNOBS[k].refusal(context) for k in on)
            or any(KNOBS[k].requires and not set(KNOBS[k].requires) <= on for k in on)
            or any({a, b} <= on for a, b in excluded_pairs())
        )
        assert (knob_message(base.replace(**switches), is_moe) is not None) == bad, switches


def test_param_gather_with_optimizer_step_is_read_checked_and_kept():
    """The knob added through the registry alone: the reader reads it, the rules want param
    gather and a virtual pipeline, the search leaves it to the script (not priced), and `apply`
    keeps it on (and removes it with the distributed optimizer)."""
    key = "overlap_param_gather_with_optimizer_step"
    text = (FIXTURES / "pretrain_qwen3_32b_ptd.sh").read_text()
    text = text.replace(
        "--overlap-param-gather", "--overlap-param-gather \\\n    --" + key.replace("_", "-")
    )
    s = read_script_text(text).train.strategy
    assert getattr(s, key) is True and s.vpp > 1 and s.dist_opt
    assert knob_message(s, is_moe=False) is None
    assert "virtual pipeline" in knob_message(s.replace(vpp=1), is_moe=False)
    assert "needs overlap_param_gather on" in knob_message(
        s.replace(overlap_param_gather=False), is_moe=False
    )
    assert all(choice[key] is None for choice in overlap_choices(s, False, OVERLAP_KEYS))
    kept = apply_strategy(text, s.replace(**{key: None}), nnodes=2, nproc_per_node=8).text
    assert "--overlap-param-gather-with-optimizer-step" in kept
    plain = s.replace(zero=0, overlap_param_gather=None, **{key: None})
    assert "with-optimizer-step" not in apply_strategy(text, plain, nnodes=2, nproc_per_node=8).text


def test_delay_wgrad_compute_is_read_checked_and_kept():
    """The knob added through the registry alone (knobs.py entry, Strategy field, flag row):
    `--delay-wgrad-compute` is read on a MoE model, needs the MoE all-to-all overlap (Megatron's
    transformer_config check), is left to the script by the search and kept by the writer."""
    key = "delay_wgrad_compute"
    text = (FIXTURES / "train_mixtral_8x7b_distributed.sh").read_text()
    text = text.replace(
        "--expert-model-parallel-size 8",
        "--expert-model-parallel-size 8 \\\n    --overlap-moe-expert-parallel-comm \\\n"
        "    --delay-wgrad-compute",
    )
    s = read_script_text(text).train.strategy
    assert getattr(s, key) is True and s.overlap_moe_comm is True
    assert knob_message(s, is_moe=True) is None
    assert "needs overlap_moe_comm on" in knob_message(
        s.replace(overlap_moe_comm=False), is_moe=True
    )
    assert "a MoE model" in knob_message(s, is_moe=False)
    assert all(choice[key] is None for choice in overlap_choices(s, True, OVERLAP_KEYS))
    assert versions.FLAG_SINCE["--delay-wgrad-compute"] == {"mindspeed": None, "megatron": (0, 14)}
    # Megatron-Core refuses the all-to-all overlap with full recompute (the script's): apply says so.
    with pytest.raises(StrategyError, match="no full recompute"):
        apply_strategy(text, s.replace(**{key: None}), nnodes=4, nproc_per_node=8)
    selective = s.replace(
        recompute=Recompute.SELECTIVE, recompute_method=None, recompute_num_layers=None
    )
    kept = apply_strategy(text, selective.replace(**{key: None}), nnodes=4, nproc_per_node=8).text
    assert "--delay-wgrad-compute" in kept


def test_moe_shared_expert_overlap_is_read_priced_searched_and_written():
    """The knob added through the registry and its cost term (knobs.py entry, costs/overlap.py):
    `--moe-shared-expert-overlap` is read on a MoE model, a `strategy` flag in Megatron-LM's
    versions, searched where the experts span ranks, hides the all-to-all behind the shared
    expert (never slower, faster with shared experts) and is written back."""
    import dataclasses

    from model_support import cluster, moe_model, synthetic_profile

    from tinker_opt.costs.evaluate import CostModel

    key, flag = "moe_shared_expert_overlap", "--moe-shared-expert-overlap"
    text = (FIXTURES / "train_mixtral_8x7b_distributed.sh").read_text()
    text = text.replace(
        "--expert-model-parallel-size 8", f"--expert-model-parallel-size 8 \\\n    {flag}"
    )
    s = read_script_text(text).train.strategy
    assert getattr(s, key) is True and knob_message(s, is_moe=True) is None
    assert "a MoE model" in knob_message(s, is_moe=False)
    assert flags.BY_NAME[flag].treatment == "strategy"
    assert versions.FLAG_SINCE[flag] == {"mindspeed": None, "megatron": (0, 10)}
    # It excludes the MoE all-to-all overlap (Megatron-Core's transformer_config check): the
    # search tries each of the two, never both; it prices nothing without shared experts (not
    # searched there) and Megatron-Core wants the alltoall dispatcher with them.
    shared = ModelFacts(True, "alltoall", True, MEGATRON, shared_experts=True)
    choices = overlap_choices(s, True, OVERLAP_KEYS, facts=shared)
    assert any(choice[key] for choice in choices)
    assert not any(choice[key] and choice["overlap_moe_comm"] for choice in choices)
    assert not any(choice[key] for choice in overlap_choices(s, True, OVERLAP_KEYS))
    flex = dataclasses.replace(shared, dispatcher="flex")
    assert not any(c[key] for c in overlap_choices(s, True, OVERLAP_KEYS, facts=flex))
    assert "alltoall token dispatcher" in knob_message(s, True, facts=flex)
    off = apply_strategy(text, s.replace(**{key: False}), nnodes=4, nproc_per_node=8).text
    assert flag not in off and flag in apply_strategy(text, s, nnodes=4, nproc_per_node=8).text

    model = dataclasses.replace(
        moe_model(num_layers=4, hidden=4096, heads=32, experts=4, seq=4096),
        moe_shared_expert_intermediate_size=8192,
        moe_token_dispatcher_type="alltoall",  # Megatron-Core's with shared experts
    )  # layers the GPU is busier with than the host's issue (costs/moe_host.py)
    profile = synthetic_profile(model, tps=(1,), cps=(1,), eps=(1, 2), mbss=(1,))
    costs = CostModel.from_profile(profile, model, cluster(2, 2, 60000), 8)
    plain = Strategy(dp=4, ep=2, overlap_moe_comm=False).replace(**{key: False})
    times = [costs.evaluate(plain.replace(**{key: on})).iteration_time_ms for on in (False, True)]
    assert times[1] < times[0]


def test_choice_knobs_name_real_fields_flags_and_versions():
    """Each record of knobs.CHOICE_KNOBS (vpp, the schedule, fb-overlap, recompute kind / method /
    count / modules, ZeRO, cp algorithm, dispatcher, FP8) names a field of its home, flags the
    flag table knows, a StrEnum where it is a choice, and the version table holds its versions."""
    import dataclasses

    from tinker_opt.choices import StrEnum
    from tinker_opt.knobs import CHOICE_KNOBS
    from tinker_opt.specs import ModelSpec, TrainSpec

    homes = {"strategy": Strategy, "model": ModelSpec, "job": TrainSpec}
    for knob in CHOICE_KNOBS:
        fields = {f.name for f in dataclasses.fields(homes[knob.home])}
        assert knob.key in fields, knob.key
        assert all(flag in flags.BY_NAME for flag in knob.flags), knob.flags
        assert knob.kind in (int, bool, str, tuple) or issubclass(knob.kind, StrEnum), knob.key
        for spelling in knob.spellings:
            if spelling.since:
                assert versions.FLAG_SINCE[spelling.flag] == spelling.since
    assert versions.FLAG_SINCE["--schedules-method"] == {"mindspeed": (2, 0, 0), "megatron": None}


def test_moe_allgather_overlap_comm_is_added_by_its_record_and_cost_term():
    """The knob added through its record and its cost term alone (knobs.py, costs/overlap.py):
    MindSpeed's `--moe-allgather-overlap-comm` is read where the allgather dispatcher runs (None
    elsewhere), a priced `strategy` flag of MindSpeed-LLM 2.0.0 on, searched only where the
    script sets it, hides the backward all-gather / reduce-scatter (never slower, faster where
    the experts span ranks) and is written back or removed."""
    import dataclasses

    from model_support import cluster, moe_model, synthetic_profile

    from tinker_opt.costs.evaluate import CostModel
    from tinker_opt.expressible import searched_overlaps

    key, flag = "moe_allgather_overlap_comm", "--moe-allgather-overlap-comm"
    alltoall = (FIXTURES / "pretrain_mixtral_8x7b_ptd.sh").read_text()
    text = alltoall.replace(
        "--moe-token-dispatcher-type alltoall",
        f"--moe-token-dispatcher-type allgather \\\n    {flag}",
    )
    info = read_script_text(text)
    s = info.train.strategy
    assert (
        getattr(s, key) is True and getattr(read_script_text(alltoall).train.strategy, key) is None
    )
    assert knob_message(s, True, "allgather", grouped_gemm=True) is None
    assert "--moe-grouped-gemm" in knob_message(s, True, "allgather")
    assert "allgather token dispatcher" in knob_message(s, True, "alltoall", True)
    assert flags.BY_NAME[flag].treatment == "strategy" and flag not in flags.unpriced_flags(
        info.launch
    )
    assert versions.FLAG_SINCE[flag] == {"mindspeed": (2, 0, 0), "megatron": None}
    assert key in searched_overlaps(info, info.version_range)
    on = s.replace(ep=2) if s.ep == 1 else s
    choices = overlap_choices(on, True, OVERLAP_KEYS, "allgather", grouped_gemm=True)
    assert all(c[key] is True for c in choices)
    assert all(c[key] is False for c in overlap_choices(on, True, OVERLAP_KEYS, "allgather"))
    assert all(c[key] is None for c in overlap_choices(on, True, OVERLAP_KEYS, "alltoall", True))
    nodes, per_node = info.train.nnodes, info.train.nproc_per_node
    off = apply_strategy(
        text, s.replace(**{key: False}), nnodes=nodes, nproc_per_node=per_node
    ).text
    assert (
        flag not in off
        and flag in apply_strategy(text, s, nnodes=nodes, nproc_per_node=per_node).text
    )

    model = dataclasses.replace(
        moe_model(num_layers=4, hidden=4096, heads=32, experts=4, seq=4096),
        moe_token_dispatcher_type="allgather",
        moe_grouped_gemm=True,
    )  # layers the GPU is busier with than the host's issue (costs/moe_host.py)
    profile = synthetic_profile(model, tps=(1,), cps=(1,), eps=(1, 2), mbss=(1,))
    costs = CostModel.from_profile(profile, model, cluster(2, 2, 60000), 8)
    plain = Strategy(dp=4, ep=2, overlap_moe_comm=False)
    times = [costs.evaluate(plain.replace(**{key: on})).iteration_time_ms for on in (False, True)]
    assert times[1] < times[0]


def test_no_module_spells_a_knob_flag_of_its_own():
    """Every flag a knob record declares is spelled in knobs.py only: the reader, the writers,
    the rules, the space, the version and flag tables and the profile read it from the record."""
    import ast
    from pathlib import Path

    from tinker_opt.knobs import all_spellings

    declared = {spelling.flag for spelling, _ in all_spellings()}
    root = Path(__file__).resolve().parents[1] / "tinker_opt"
    found = [
        f"{path.relative_to(root)}:{node.lineno} {node.value}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "knobs.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in declared
    ]
    assert found == []


def test_a_switch_on_is_written_with_the_flags_its_framework_needs():
    """MindSpeed refuses `--moe-allgather-overlap-comm` without `--moe-permutation-async-comm`
    and `--moe-grouped-gemm` (mindspeed/features_manager/moe/moe_allgather_overlap.py
    validate_args): a plain search (no script to narrow it) turns it on only with grouped GEMM,
    the model's priced fact, and the writer adds the unpriced companion (`Knob.with_flags`), so
    the written script launches; turned off, the knob's flag goes and the companion stays."""
    key, flag = "moe_allgather_overlap_comm", "--moe-allgather-overlap-comm"
    needed = KNOBS[key].with_flags
    assert needed == ("--moe-permutation-async-comm",)
    text = (FIXTURES / "pretrain_mixtral_8x7b_ptd.sh").read_text()
    text = text.replace(
        "--moe-token-dispatcher-type alltoall", "--moe-token-dispatcher-type allgather"
    )
    text = text.replace(f"{needed[0]} \\\n", "")
    assert flag not in text and needed[0] not in text
    info = read_script_text(text)
    s, model = info.train.strategy, info.model
    assert model.moe_grouped_gemm and getattr(s, key) is False
    plain = overlap_choices(s, True, SearchSpace().overlaps, "allgather", model.moe_grouped_gemm)
    assert all(choice[key] is True for choice in plain)
    nodes, per_node = info.train.nnodes, info.train.nproc_per_node
    written = apply_strategy(text, s.replace(**{key: True}), nnodes=nodes, nproc_per_node=per_node)
    assert flag in written.text and needed[0] in written.text
    again = read_script_text(written.text)
    assert getattr(again.train.strategy, key) is True
    assert (
        knob_message(again.train.strategy, True, "allgather", again.model.moe_grouped_gemm) is None
    )
    off = apply_strategy(written.text, s, nnodes=nodes, nproc_per_node=per_node).text
    assert flag not in off and needed[0] in off
    no_gemm = text.replace("--moe-grouped-gemm", "")
    bare = read_script_text(no_gemm).model
    assert not bare.moe_grouped_gemm
    assert all(
        choice[key] is False
        for choice in overlap_choices(
            s, True, SearchSpace().overlaps, "allgather", bare.moe_grouped_gemm
        )
    )


def test_the_rules_are_the_records():
    """rules.py runs the world-size rule, every layout and choice record's `check` in registry
    order and the switches' declarations; the split rules are the records' `split_check`. A
    record's rule reads the record (its `excludes`), so the declaration is the rule."""
    import dataclasses
    from types import SimpleNamespace

    from tinker_opt import rules
    from tinker_opt.framework_rules import LATEST_RULES
    from tinker_opt.knobs import CHOICE_KNOBS, CHOICES

    records = [k for k in (*LAYOUT_KNOBS, *CHOICE_KNOBS) if k.check is not None]
    names = [rule.__name__ for rule in rules.OUTER_RULES]
    assert names == ["_rule_world", *(f"{k.key}_rule" for k in records), "_rule_overlap"]
    assert {"tp", "ep", "sp", "mbs", "vpp", "dualpipev", "moe_fb_overlap", "cp_algo"} <= {
        k.key for k in records
    }
    assert [k.key for k in rules.SPLIT_RULES] == [
        "dualpipev",
        "num_layer_list",
        "recompute_num_layers",
    ]
    assert all(k.check or k.split_check or k.rules for k in CHOICE_KNOBS)  # every record says
    fb = CHOICES["moe_fb_overlap"]
    model = SimpleNamespace(
        is_moe=True, moe_token_dispatcher_type="alltoall", moe_grouped_gemm=True
    )
    s = Strategy(dp=8, ep=2, etp=1, moe_fb_overlap=True, overlap_grad_reduce=True)
    assert fb.check is not None
    assert "excludes overlap_grad_reduce" in fb.check(fb, s, model, 8, 64, LATEST_RULES)
    assert fb.check(dataclasses.replace(fb, excludes=()), s, model, 8, 64, LATEST_RULES) is None


def test_ep_overlap_early_attn_memory_release_came_in_through_its_record():
    """Megatron-Core 0.16's `--ep-overlap-early-attn-memory-release`, added as its record alone
    (knobs.py; the README flag table regenerated): read on a MoE model, refused without the MoE
    all-to-all overlap (transformer_config.py), not priced (the search keeps the script's
    setting), written back, its version in the table, its row in `inspect`."""
    from tinker_opt.script.knob_report import NOT_PRICED, knob_section

    key, flag = "ep_overlap_early_attn_memory_release", "--ep-overlap-early-attn-memory-release"
    text = (FIXTURES / "train_mixtral_8x7b_distributed.sh").read_text()
    text = text.replace(
        "--expert-model-parallel-size 8",
        f"--expert-model-parallel-size 8 \\\n    --overlap-moe-expert-parallel-comm \\\n    {flag}",
    ).replace("--recompute-granularity full", "--recompute-granularity selective")
    info = read_script_text(text)
    s = info.train.strategy
    assert getattr(s, key) is True and knob_message(s, is_moe=True) is None
    assert "needs overlap_moe_comm on" in knob_message(
        s.replace(overlap_moe_comm=False), is_moe=True
    )
    assert all(choice[key] is None for choice in overlap_choices(s, True, OVERLAP_KEYS))
    assert versions.FLAG_SINCE[flag] == {"mindspeed": None, "megatron": (0, 16)}
    assert flags.BY_NAME[flag].treatment == "strategy, not priced"
    assert knob_section(info)[key] == {
        "value": True,
        "flags": [flag],
        "searched": False,
        "priced": NOT_PRICED,
    }
    kept = apply_strategy(text, s.replace(**{key: None}), nnodes=4, nproc_per_node=8).text
    assert flag in kept
    off = s.replace(overlap_moe_comm=False, **{key: False})
    assert flag not in apply_strategy(text, off, nnodes=4, nproc_per_node=8).text
