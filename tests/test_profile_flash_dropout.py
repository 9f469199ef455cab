"""Flash attention with attention dropout keeps no seq x seq tensor (profile/layers.py)."""

import dataclasses

from profile_support import llama_model

from tinker_opt.profile.shape import Shape
from tinker_opt.profile.subgraphs import build_block, saved_activation_bytes


def _saved(seq: int, dropout: float) -> int:
    model = dataclasses.replace(llama_model(seq=seq), attention_dropout=dropout)
    return saved_activation_bytes(build_block(model, "layer", Shape()))


def test_attention_dropout_does_not_materialise_scores():
    """With --use-flash-attn, dropout changes nothing saved and bytes grow linearly in seq."""
    assert _saved(256, 0.1) == _saved(256, 0.0)
    assert _saved(512, 0.1) == 2 * _saved(256, 0.1)
