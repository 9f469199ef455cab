"""Megatron-LM's uneven pipeline layouts: `--pipeline-model-parallel-layout` and the
`--account-for-embedding/loss-in-pipeline-split` switches, read into per-virtual-stage layer
counts and written back.

Layout string (NVIDIA/Megatron-LM docs/user-guide/features/pipeline_parallel_layout.md and
megatron/core/transformer/pipeline_parallel_layer_layout.py `parse_str_to_list`): stages are split
by `|`, `E` is the embedding, `t` a decoder layer, `m` an MTP layer, `L` the loss; `x*n` repeats a
symbol, `(...)*n` a group, commas are cosmetic. The stage list has pp * vpp entries in layer
order: virtual stage k is chunk k // pp of pipeline rank k % pp. Megatron checks that E comes
first and L last, each once, that the `t` count is num_layers and the `m` count mtp_num_layers.

Account-for switches (megatron/core/transformer/transformer_block.py get_num_layers_to_build):
num_layers + 1 per switch is split evenly over pp ranks (and over each rank's vpp chunks), then
the first virtual stage builds one decoder layer fewer for the embedding, the last one fewer for
the loss.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tinker_opt.errors import ScriptError
from tinker_opt.knobs import CHOICES

_SPLIT = CHOICES["num_layer_list"]
LAYOUT_FLAG = _SPLIT.flag_for("layout")
EMBEDDING_FLAG = _SPLIT.flag_for("embedding")
LOSS_FLAG = _SPLIT.flag_for("loss")
"""The layer split's flags (the num_layer_list record, knobs.py)."""
_SYMBOLS = set("ELtm")
_MAX_CHARS = 1_000_000
"""A guard against `(t*100000)*100000`: no layout is this long."""


def _unroll(pattern: str, text: str) -> str:
    def repeat(match: re.Match) -> str:
        count = int(match.group(2))
        if len(match.group(1)) * count > _MAX_CHARS:
            raise ScriptError(f"{LAYOUT_FLAG} repeats too much ({match.group(0)[:30]})")
        return match.group(1) * count

    return re.sub(pattern, repeat, text)


def parse_layout(text: str) -> list[str]:
    """The stages of a layout string, each a string of E / t / m / L (Megatron's expansion)."""
    raw = text.strip().strip("'\"").replace(",", "").replace(" ", "")
    expanded = _unroll(r"(.)\*(\d+)", _unroll(r"\(([^)]+)\)\*(\d+)", raw))
    stages = expanded.split("|")
    bad = sorted(set("".join(stages)) - _SYMBOLS)
    if bad or not raw:
        raise ScriptError(
            f"{LAYOUT_FLAG} {text!r} has unknown symbols {bad}; use E, t, m, L, |, *n and (...)*n"
        )
    return stages


def layout_split(text: str, pp: int, num_layers: int, mtp_layers: int) -> tuple[int, list[int]]:
    """(vpp, decoder layers per virtual stage in layout order) of a layout string, checked as
    Megatron checks it (pipeline_parallel_layer_layout.py validate_layer_layout)."""
    stages = parse_layout(text)
    flat = "".join(stages)
    problems = []
    if len(stages) % pp:
        problems.append(f"{len(stages)} stages are not a multiple of pp ({pp})")
    if flat[:1] != "E" or flat[-1:] != "L" or flat.count("E") != 1 or flat.count("L") != 1:
        problems.append("E must come first and L last, once each")
    if flat.count("t") != num_layers:
        problems.append(f"it has {flat.count('t')} decoder layers but --num-layers is {num_layers}")
    if flat.count("m") != mtp_layers:
        problems.append(f"it has {flat.count('m')} MTP layers but --mtp-num-layers is {mtp_layers}")
    if problems:
        raise ScriptError(f"{LAYOUT_FLAG} {text!r}: {'; '.join(problems)}")
    return len(stages) // pp, [stage.count("t") for stage in stages]


def _stage_text(decoders: int, first: bool, last: bool, mtp_layers: int) -> str:
    body = "t" * decoders if decoders < 2 else f"t*{decoders}"
    tail = ("m" * mtp_layers + "L") if last else ""
    return ("E" if first else "") + body + tail


def layout_text(chunks: Sequence[int], mtp_layers: int = 0) -> str:
    """The layout string of per-virtual-stage decoder counts: E on the first virtual stage, the
    MTP layers and L on the last (Megatron keeps MTP in a rank's last chunk, never on rank 0);
    runs of three or more equal middle stages written as `(...|)*n`."""
    texts = [_stage_text(n, k == 0, k == len(chunks) - 1, mtp_layers) for k, n in enumerate(chunks)]
    out, k = "", 0
    while k < len(texts):
        run = 1
        while k > 0 and k + run < len(texts) - 1 and texts[k + run] == texts[k]:
            run += 1
        if run >= 3:
            out += f"({texts[k]}|)*{run}"
        else:
            out += "|".join(texts[k : k + run]) + ("|" if k + run < len(texts) else "")
        k += run
    return out


def accounted_split(num_layers: int, pp: int, vpp: int, embedding: bool, loss: bool) -> list[int]:
    """Decoder layers per virtual stage (layout order) under the account-for switches."""
    total = num_layers + int(embedding) + int(loss)
    if total % (pp * vpp):
        raise ScriptError(
            f"--num-layers {num_layers} plus the embedding / loss counted by the account-for "
            f"switches ({total}) is not a multiple of pp x vpp ({pp * vpp}); Megatron refuses it"
        )
    chunks = [total // (pp * vpp)] * (pp * vpp)
    chunks[0] -= int(embedding)
    chunks[-1] -= int(loss)
    return chunks
