"""The facts of a framework version that the validity rules depend on (script/versions.py builds
them for a script; rules.py and cp_rules.py judge a strategy with them)."""

from __future__ import annotations

from dataclasses import dataclass

from tinker_opt.layer_stack import LAYER_FORMS


@dataclass(frozen=True)
class FrameworkRules:
    """Facts of the target framework version that validity rules depend on (script/versions.py)."""

    overlap_p2p_comm: bool = True
    """The interleaved schedule overlaps p2p send/recv with compute: on by default since Megatron-LM
    core_v0.8 / MindSpeed-LLM 2.0.0 (`--no-overlap-p2p-communication` turns it off), off before
    (`--overlap-p2p-communication` turned it on)."""
    layer_form: str = "free"
    """Which per-stage layer counts the framework can be told (LAYER_FORMS)."""
    unaligned_ulysses: bool = True
    """Ulysses context parallelism runs with num_attention_heads not a multiple of tp*cp (the
    uneven head split of MindSpeed's unaligned all-to-all, `ulysses_heads_message`); False
    where the version lacks it (script/versions.py UNALIGNED_ULYSSES_SINCE)."""
    family: str | None = None
    """The framework family (knob_types.MINDSPEED, MEGATRON; None: not known): the switches'
    own argument checks differ by family (knob_rules.moe_comm_refusal)."""

    def __post_init__(self) -> None:
        if self.layer_form not in LAYER_FORMS:
            raise ValueError(
                f"layer_form must be one of {list(LAYER_FORMS)}, got {self.layer_form!r}"
            )


LATEST_RULES = FrameworkRules()
"""The rules of recent framework versions: the default where the version is not known."""
