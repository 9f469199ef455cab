"""Helpers for the script tests: fixture paths, valid strategies for a fixture, diff checks."""

from __future__ import annotations

import difflib
import itertools
import math
import re
import subprocess
from pathlib import Path

from hypothesis import strategies as st

from tinker_opt.knobs import KNOBS, KnobContext, ModelFacts, knob_message
from tinker_opt.script import versions
from tinker_opt.script.reader import ScriptInfo
from tinker_opt.script.train_args import p2p_overlap
from tinker_opt.strategy import Strategy

FIXTURES = Path(__file__).parent / "fixtures" / "scripts"
FIXTURE_PATHS = sorted(FIXTURES.glob("*.sh"))

OWNED_FLAGS = {
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--context-parallel-size",
    "--context-parallel-algo",
    "--ulysses-degree-in-cp",
    "--use-cp-send-recv-overlap",
    "--cp-attention-mask-type",
    "--cp-window-size",
    "--use-fused-ring-attention-update",
    "--kv-head-repeat-before-uly-alltoall",
    "--cp-comm-type",
    "--expert-model-parallel-size",
    "--expert-tensor-parallel-size",
    "--moe-tp-extend-ep",
    "--sequence-parallel",
    "--num-layers-per-virtual-pipeline-stage",
    "--virtual-pipeline-model-parallel-size",
    "--num-virtual-stages-per-pipeline-rank",
    "--pipeline-model-parallel-layout",
    "--num-layer-list",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--use-distributed-optimizer",
    "--micro-batch-size",
    "--enable-recompute-layers-per-pp-rank",
    "--schedules-method",
    "--moe-fb-overlap",
    "--nnodes",
    "--nproc_per_node",
    "--worker_num",
    "--local_worker_num",
    "--num_nodes",
    "--num_gpus",
    # the knob registry's switches and their companions
    *(flag for knob in KNOBS.values() for flag in (*knob.flags, *knob.companions)),
}
_VALUE = (
    r"(\d+(,\d+)*|full|selective|block|uniform|\w+_cp_algo|causal|general|dualpipev"
    r"|core_attn|moe_act|layernorm|mla_up_proj|mlp|moe|shared_experts"  # --recompute-modules
    r"|[EtmL|()*\d]+)"  # a --pipeline-model-parallel-layout string
)
_ALLOWED_TOKEN = re.compile(
    rf"^({_VALUE}|\\|[A-Z_]+={_VALUE}|[A-Z_]+='{_VALUE}'|[A-Z_]+=\"{_VALUE}\"|\$\{{?\w+\}}?|"
    r"--recompute-(granularity|activations|modules|method|num-layers)|(NNODES|NUM_NODES|NPUS_PER_NODE|GPUS_PER_NODE)=\S*)$"
)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def bash_syntax_ok(text: str) -> tuple[bool, str]:
    """Whether `bash -n` accepts the text."""
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=20)
    return proc.returncode == 0, proc.stderr


def foreign_changes(before: str, after: str) -> list[str]:
    """Tokens the edit removed or added that are not strategy-owned (empty when the diff is clean)."""
    a_lines, b_lines = before.splitlines(), after.splitlines()
    bad: list[str] = []
    if a_lines[:1] != b_lines[:1]:
        bad.append("line 1 changed")
    matcher = difflib.SequenceMatcher(a=a_lines, b=b_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        old = " ".join(a_lines[i1:i2]).split()
        new = " ".join(
            line for line in b_lines[j1:j2] if not line.startswith("# tinker-opt: ")
        ).split()
        words = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
        for wtag, x1, x2, y1, y2 in words.get_opcodes():
            if wtag != "equal":
                bad.extend(t for t in old[x1:x2] + new[y1:y2] if not _owned(t))
    return bad


def _owned(token: str) -> bool:
    if _ALLOWED_TOKEN.match(token):
        return True
    token = token.strip("\"'")
    return not token or token in OWNED_FLAGS or bool(_ALLOWED_TOKEN.match(token))


@st.composite
def strategies_for(draw, info: ScriptInfo):
    """(strategy, nnodes, nproc_per_node, expected read-back) valid for the fixture's model."""
    model, launch = info.model, info.launch
    vr = info.version_range
    allowed = lambda flag: launch.has(flag) or versions.flag_allowed(flag, vr)
    nnodes = draw(st.sampled_from([1, 2, 4]))
    nproc = draw(st.sampled_from([4, 8, 16]))
    world = nnodes * nproc
    total = info.num_layers_in_script
    tp = draw(
        st.sampled_from(
            [
                d
                for d in divisors(math.gcd(model.num_attention_heads, model.num_query_groups))
                if world % d == 0
            ]
        )
    )
    layer_list_ok = allowed("--num-layer-list") or allowed("--decoder-first-pipeline-num-layers")
    pps = [d for d in divisors(world // tp) if total % d == 0 or (layer_list_ok and d <= total)]
    pp = draw(st.sampled_from(pps))
    cp = draw(
        st.sampled_from(divisors(world // (tp * pp)) if allowed("--context-parallel-size") else [1])
    )
    dp = world // (tp * pp * cp)
    return draw(_rest(info, vr, allowed, world, tp, pp, cp, dp, nnodes, nproc))


@st.composite
def _rest(draw, info, vr, allowed, world, tp, pp, cp, dp, nnodes, nproc):
    model, total = info.model, info.num_layers_in_script
    megatron = vr.family == versions.MEGATRON
    algo = None
    if cp > 1:
        algos = (
            ["megatron_cp_algo"]
            if megatron
            else [a for a, since in versions.CP_ALGO_SINCE.items() if vr.allows(since)]
        )
        algo = draw(st.sampled_from(algos))
    ep, etp = 1, None
    if model.is_moe:
        etps = [None]
        if allowed("--expert-tensor-parallel-size"):
            etps += [1, tp]
        elif info.launch.has("--moe-tp-extend-ep") and tp > 1 and model.num_experts % tp == 0:
            etps.append(1)  # at tp 1, etp 1 is the default; ep a multiple of tp (below)
        etp = draw(st.sampled_from(etps))
        eff = tp if etp is None else etp
        eps = [e for e in divisors(model.num_experts) if (tp * dp * cp) % (e * eff) == 0]
        if etp == 1 and not allowed("--expert-tensor-parallel-size"):
            eps = [e for e in eps if e % tp == 0]  # --moe-tp-extend-ep: tp x the flag's ep
        ep = draw(st.sampled_from(eps if allowed("--expert-model-parallel-size") else [1]))
    layer_list = draw(_layer_list(total, pp, megatron, info, allowed))
    vpps = [1]
    least_pp = 2 if p2p_overlap(info.launch, vr) else 3  # Megatron's interleaved-schedule check
    if pp >= least_pp and layer_list is None and allowed("--num-layers-per-virtual-pipeline-stage"):
        vpps = [v for v in range(1, total // pp + 1) if total % (pp * v) == 0][:6]
    vpp = draw(st.sampled_from(vpps))
    gbs = info.train.global_batch_size
    mbss = [m for m in divisors(gbs // dp) if m <= 8] if gbs % dp == 0 else [1, 2]
    stage = (max(layer_list) if layer_list else total // pp) // vpp
    recompute = draw(st.sampled_from(["none", "selective", "full"]))
    method = draw(st.sampled_from(["block", "uniform"])) if recompute == "full" else None
    rc_layers = draw(st.integers(1, max(stage, 1))) if recompute == "full" else None
    s = Strategy(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        cp_algo=algo,
        ep=ep,
        etp=etp,
        sp=draw(st.booleans()),
        vpp=vpp,
        zero=draw(st.integers(0, 1)),
        mbs=draw(st.sampled_from(mbss)),
        recompute=recompute,
        recompute_method=method,
        recompute_num_layers=rc_layers,
        num_layer_list=layer_list,
    )
    overlaps, expected_overlaps = draw(_overlaps(info, s, allowed))
    s = s.replace(**overlaps)
    expected = s.replace(
        sp=s.sp and tp > 1,
        num_layer_list=None if megatron and pp == 1 else layer_list,
        **expected_overlaps,
    )
    return s, nnodes, nproc, expected


@st.composite
def _overlaps(draw, info, s, allowed):
    """(overlap knobs to apply, what the tuned script reads back): None where a knob applies keeps
    the script's setting; knobs that do not apply read back as None; only valid combinations (a
    knob whose effective value the registry's rules refuse, given the knobs before it, is off)."""
    current, is_moe = info.train.strategy, info.model.is_moe
    facts = ModelFacts.of(info.model, info.version_range.family)
    context = KnobContext.of_facts(s, facts)
    chosen, expected = {}, {}
    for key, knob in KNOBS.items():
        can_on = any(info.launch.has(f) or allowed(f) for f in knob.flags)
        value = draw(st.sampled_from([None, True, False] if can_on else [None, False]))
        effective = bool(getattr(current, key)) if value is None else value
        if effective and knob_message(s.replace(**expected, **{key: True}), is_moe, facts=facts):
            value, effective = False, False
        chosen[key] = value
        expected[key] = effective if knob.exists(context) else None
    return chosen, expected


@st.composite
def _layer_list(draw, total, pp, megatron, info, allowed):
    if pp == 1 and megatron:
        return None
    even = total % pp == 0
    if megatron:
        if not allowed("--decoder-first-pipeline-num-layers") or pp < 2:
            return None
        options = [
            (f, m, total - f - m * (pp - 2))
            for m in range(1, total // max(pp - 2, 1) + 1)
            for f in range(1, total)
            if pp > 2 or m == 1
        ]
        options = [
            (f, m, last) for f, m, last in options if last >= 1 and (pp > 2 or f + last == total)
        ]
        if (even and draw(st.booleans())) or not options:
            return None
        f, m, last = draw(st.sampled_from(options[:50]))
        return (f,) + (m,) * (pp - 2) + (last,)
    if not allowed("--num-layer-list") or (even and draw(st.booleans())):
        return None
    if pp > total:
        return None
    cuts = sorted(
        draw(st.lists(st.integers(1, total - 1), min_size=pp - 1, max_size=pp - 1, unique=True))
    )
    bounds = [0] + cuts + [total]
    return tuple(b - a for a, b in itertools.pairwise(bounds))
