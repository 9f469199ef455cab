"""Framework flavours and versions, and which parallel flags each version has.

MindSpeed-LLM versions follow its release tags: Tinker's `1.0`, `1.1`, `1.2` are ModelLink
1.0.RC1..RC3, then `1.0.0`, `2.0.0` ... `2.3.0`, `26.0.0`. Megatron-LM versions are the core tags
(`core_v0.10.0` or `0.10`). A version is kept as a sortable key; when the user does not give one,
the script's flags bound it from below and above (a flag introduced at 2.2.0 proves >= 2.2.0, a
flag renamed away at 2.2.0 proves < 2.2.0) and a flag is allowed unless the bounds exclude it.
Sources: the argument parsers and example launch scripts of each release tag: Ascend/MindSpeed-LLM
(`mindspeed_llm/training/arguments.py`, `examples/`, tags v1.0.RC1.0 ... v26.1.0) and NVIDIA/Megatron-LM
(`megatron/training/arguments.py`, core_v0.6.0 ... main).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tinker_opt.errors import ConfigError
from tinker_opt.knobs import CHOICES, flag_versions
from tinker_opt.knobs import MEGATRON as _KNOB_MEGATRON
from tinker_opt.knobs import MINDSPEED as _KNOB_MINDSPEED

MINDSPEED = "mindspeed"
MEGATRON = "megatron"
assert (MINDSPEED, MEGATRON) == (_KNOB_MINDSPEED, _KNOB_MEGATRON), "one spelling of the families"
PRE_MODELLINK = (0, 0, 0)
"""Pre-1.0 ModelLink (2023, `pretrain_llama.py`)."""
_RC = {"1": (0, 9, 1), "2": (0, 9, 2), "3": (0, 9, 3)}
_TINKER = {"1.0": (0, 9, 1), "1.1": (0, 9, 2), "1.2": (0, 9, 3)}
_LATEST = (999,)

_KNOB_SINCE, _KNOB_UNTIL = flag_versions()
# Flag -> first version that has it, per family (absent: every version has it).
FLAG_SINCE: dict[str, dict[str, tuple[int, ...] | None]] = {
    # The knobs' flags (overlap switches, layout sizes and --moe-tp-extend-ep, the layer split,
    # vpp, the schedule, fb-overlap, the cp algorithm): declared with each knob (knobs.py).
    **_KNOB_SINCE,
    # MindSpeed-LLM: first release whose examples use them (reference/script-conventions.md).
    "--overlap-p2p-communication": {MINDSPEED: (0, 9, 1), MEGATRON: (0, 0)},
    "--no-overlap-p2p-communication": {MINDSPEED: (2, 0, 0), MEGATRON: (0, 8)},
    "--recompute-activation-function": {MINDSPEED: (1, 0, 0), MEGATRON: None},
    "--recompute-activation-function-num-layers": {MINDSPEED: (2, 0, 0), MEGATRON: None},
}
"""None means the family never has the flag."""

FLAG_UNTIL: dict[str, dict[str, tuple[int, ...]]] = {
    **_KNOB_UNTIL,  # knobs.py (--use-mc2 renamed --use-ascend-mc2 at 2.2.0)
    # Megatron-LM turned p2p overlap on by default (commit 152c562, mid 2024; issue #750), making
    # the switch `--no-overlap-p2p-communication`; MindSpeed-LLM 2.0.0 moved to that Megatron core.
    "--overlap-p2p-communication": {MINDSPEED: (2, 0, 0), MEGATRON: (0, 8)},
}
"""Flag -> first version (exclusive) that no longer has it, per family."""

P2P_OVERLAP_DEFAULT_SINCE = {MINDSPEED: (2, 0, 0), MEGATRON: (0, 8)}
"""First version whose interleaved schedule overlaps p2p communication by default."""

CP_ALGO_SINCE: dict[str, tuple[int, ...]] = CHOICES["cp_algo"].value_since
"""First MindSpeed-LLM release with each context-parallel algorithm (the cp_algo record, knobs.py)."""

UNALIGNED_ULYSSES_SINCE: tuple[int, ...] = (2, 1, 0)
"""First MindSpeed-LLM release assumed to run Ulysses with num_attention_heads not a multiple of
tp*cp (rules.FrameworkRules.unaligned_ulysses). The execution path is MindSpeed's unaligned
all-to-all (Ascend/MindSpeed mindspeed/core/context_parallel/ulysses_context_parallel/
unaligned_cp/mapping.py, used by ulysses_context_parallel.py UlyssesContextAttention and by
MindSpeed-LLM's FSDP2 backend). ASSUMPTION, not sourced: MindSpeed-LLM's own argument check
(mindspeed_llm/training/arguments.py _validate_cp_args._check_attention_head) still asks for
heads divisible by tp*cp in every version read (ModelLink 1.0.RC* up to a `--use-ascend-mc2`
release); its example pretrain_qwen25_7b_32k_ptd.sh (28 heads, Ulysses cp 8) relies on the
unaligned path. Megatron-LM has no Ulysses algorithm at all."""

# Evidence in a script: (pattern, family, lower bound or None, upper bound (exclusive) or None).
_EVIDENCE = (
    (r"--use-mcore-models\b", MINDSPEED, (0, 9, 3), None),
    (r"--context-parallel-algo\b", MINDSPEED, (0, 9, 3), None),
    (r"\bposttrain_gpt\.py\b", MINDSPEED, (1, 0, 0), None),
    (
        r"--(moe-tp-extend-ep|noop-layers|schedules-method|moe-alltoall-overlap-comm)\b",
        MINDSPEED,
        (2, 0, 0),
        None,
    ),
    (r"(^|\s)msrun\s|--use-ascend-coc\b", MINDSPEED, (2, 1, 0), None),
    (
        r"--(moe-ffn-hidden-size|use-ascend-mc2|moe-router-num-groups|moe-router-group-topk)\b",
        MINDSPEED,
        (2, 2, 0),
        None,
    ),
    (r"kvallgather_cp_algo", MINDSPEED, (26, 1, 0), None),
    (
        r"--(moe-intermediate-size|topk-group|n-group|routed-scaling-factor)\b",
        MINDSPEED,
        None,
        (2, 2, 0),
    ),
    (r"--use-mc2\b", MINDSPEED, None, (2, 2, 0)),
    (r"--(moe-train-capacity-factor|noisy[-_]gate[-_]policy)\b", MINDSPEED, None, (1, 0, 0)),
    (r"\bpretrain_llama\.py\b|--DDP-impl\b", MINDSPEED, PRE_MODELLINK, (0, 9, 1)),
    (
        r"--(expert-tensor-parallel-size|decoder-first-pipeline-num-layers|cp-comm-type)\b",
        MEGATRON,
        (0, 10),
        None,
    ),
    (
        r"--(recompute-modules|pipeline-model-parallel-layout|num-virtual-stages-per-pipeline-rank)\b",
        MEGATRON,
        (0, 13),
        None,
    ),
    (
        r"--(pipeline-model-parallel-split-rank|standalone-embedding-stage)\b",
        MEGATRON,
        None,
        (0, 11),
    ),
    (r"--no-overlap-p2p-communication\b", MEGATRON, (0, 8), None),
    (r"--no-overlap-p2p-communication\b", MINDSPEED, (2, 0, 0), None),
    (r"--overlap-moe-expert-parallel-comm\b", MEGATRON, (0, 14), None),
)


@dataclass(frozen=True)
class VersionRange:
    """What is known of the framework version: exact (user-given) or bounds from the script."""

    family: str
    low: tuple[int, ...] | None = None
    high: tuple[int, ...] | None = None
    """Exclusive upper bound."""
    exact: tuple[int, ...] | None = None

    def allows(self, since: tuple[int, ...] | None) -> bool:
        """Whether a flag that first appears at `since` may exist in this version."""
        if since is None:
            return False
        if self.exact is not None:
            return self.exact >= since
        return self.high is None or since < self.high

    def allows_before(self, until: tuple[int, ...] | None) -> bool:
        """Whether the version may be older than `until` (a flag removed at `until` may exist)."""
        if until is None:
            return True
        if self.exact is not None:
            return self.exact < until
        return self.low is None or self.low < until

    def describe(self) -> str | None:
        """`2.2.0`, `>=2.2.0`, `<2.2.0`, `>=1.0.RC3,<2.2.0` or None when nothing is known."""
        if self.exact is not None:
            return format_version(self.family, self.exact)
        parts = []
        if self.low is not None:
            parts.append(">=" + format_version(self.family, self.low))
        if self.high is not None:
            parts.append("<" + format_version(self.family, self.high))
        return ",".join(parts) or None

    @property
    def label(self) -> str:
        return self.describe() or "unknown version"


def format_version(family: str, key: tuple[int, ...]) -> str:
    if key == _LATEST:
        return "master" if family == MINDSPEED else "main"
    if family == MEGATRON:
        return "core_v" + ".".join(str(k) for k in key)
    if key == PRE_MODELLINK:
        return "pre-1.0 ModelLink"
    if key[:2] == (0, 9):
        return f"1.0.RC{key[2]}"
    return ".".join(str(k) for k in key)


def parse_version(text: str, family: str) -> tuple[str, tuple[int, ...]]:
    """(family, key) of a user-given version; ConfigError for an unknown spelling."""
    raw = text.strip().lower().lstrip("v")
    if raw in ("master", "main", "latest"):
        return family, _LATEST
    if raw in _TINKER:
        return MINDSPEED, _TINKER[raw]
    match = re.fullmatch(r"1\.0\.rc(\d)(\.0)?", raw)
    if match and match.group(1) in _RC:
        return MINDSPEED, _RC[match.group(1)]
    match = re.fullmatch(r"(core_[rv])?(\d+)\.(\d+)(?:\.(\d+))?", raw)
    if not match:
        raise ConfigError(
            f"unknown framework version {text!r}; use a MindSpeed-LLM version (1.0, 1.1, 1.2, "
            "1.0.0, 2.0.0 ... 2.3.0, 26.0.0) or a Megatron-LM core version (core_v0.10.0)"
        )
    key = tuple(int(g) for g in match.groups()[1:] if g is not None)
    if match.group(1) or key[0] == 0:
        return MEGATRON, key[:2]
    return MINDSPEED, key + (0,) * (3 - len(key))


def detect_range(text: str, family: str) -> VersionRange:
    """Bounds on the version from the flags a script uses (family from the flavour)."""
    low: tuple[int, ...] | None = None
    high: tuple[int, ...] | None = None
    for pattern, fam, lo, hi in _EVIDENCE:
        if fam != family or not re.search(pattern, text, re.M):
            continue
        if lo is not None and (low is None or lo > low):
            low = lo
        if hi is not None and (high is None or hi < high):
            high = hi
    if low is not None and high is not None and low >= high:
        high = None  # contradictory evidence: stay permissive
    return VersionRange(family, low, high)


def resolve(version: str | None, text: str, flavour: str) -> VersionRange:
    """The version to write for: the user's (exact) or the script's bounds."""
    family = MEGATRON if flavour == MEGATRON else MINDSPEED
    if version is None:
        return detect_range(text, family)
    fam, key = parse_version(version, family)
    return VersionRange(fam, exact=key)


def flag_allowed(flag: str, versions: VersionRange) -> bool:
    table = FLAG_SINCE.get(flag)
    if table is None:
        return True
    until = FLAG_UNTIL.get(flag, {}).get(versions.family)
    return versions.allows(table.get(versions.family)) and versions.allows_before(until)


def p2p_overlap_default(versions: VersionRange) -> bool:
    """Whether the interleaved schedule overlaps p2p communication when the script says nothing;
    with only bounds known, the recent default unless the bounds exclude it (as flag_allowed)."""
    return versions.allows(P2P_OVERLAP_DEFAULT_SINCE[versions.family])
