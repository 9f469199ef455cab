"""Megatron's argument dump as a launch line, so that the script reader builds the same job.

The dump (megatron/training/arguments.py `_print_args`) lists every argument after parsing, by
its destination name (`tensor_model_parallel_size ..... 4`). Each name whose flag
(`--tensor-model-parallel-size`) the reader knows (script/flags.py BY_NAME) is written back as
that flag: `True` as the bare switch, `False` / `None` / empty left out, lists as comma lists;
`add_bias_linear False` is Megatron's `--disable-bias-linear`. The launcher counts come from
`world_size` (the dump does not say how many nodes; `devices_per_node` does). The result is read
by `read_script_text`, the one reader of launches.
"""

from __future__ import annotations

import re
import shlex

from tinker_opt.errors import LogError
from tinker_opt.knobs import CHOICES
from tinker_opt.script.flags import BY_NAME

TOKENIZER_VOCAB = {
    # Megatron builds the vocabulary from the tokenizer when --vocab-size is not given; these
    # tokenizers have a fixed size (megatron/training/tokenizer/tokenizer.py: GPT-2's
    # vocab.json holds 50257 entries; LLaMA-2's sentencepiece model 32000).
    "GPT2BPETokenizer": 50257,
    "Llama2Tokenizer": 32000,
}
_NEGATED = {
    "add_bias_linear": "--disable-bias-linear",
    "gradient_accumulation_fusion": "--no-gradient-accumulation-fusion",
    "create_attention_mask_in_dataloader": "--no-create-attention-mask-in-dataloader",
}
_LEFT_OUT = {
    # Present in every dump with a default that is not a choice of the run.
    "data_parallel_sharding_strategy",
    "virtual_pipeline_model_parallel_size",  # derived from the per-stage layers when both exist
}
_EMPTY = {"None", "", "[]", "False"}


def _value(text: str) -> str:
    """`[61, 62]` (a Python list as printed) as `61,62`; everything else as printed."""
    if text.startswith("[") and text.endswith("]"):
        return ",".join(part.strip(" '\"") for part in text[1:-1].split(",") if part.strip())
    return text


def _flags(arguments: dict[str, str]) -> list[str]:
    """The launch arguments of a dump (known flags only)."""
    words: list[str] = []
    for name, text in arguments.items():
        if name in _NEGATED and text == "False":
            words.append(_NEGATED[name])
            continue
        flag = "--" + name.replace("_", "-")
        if flag not in BY_NAME or text in _EMPTY or name in _LEFT_OUT:
            continue
        words += [flag] if text == "True" else [flag, _value(text)]
    if (
        "num_layers_per_virtual_pipeline_stage" not in arguments
        or arguments["num_layers_per_virtual_pipeline_stage"] in _EMPTY
    ):
        virtual = arguments.get("virtual_pipeline_model_parallel_size", "None")
        if virtual not in _EMPTY:
            words += [CHOICES["vpp"].flags_for("size")[0], virtual]
    if arguments.get("vocab_size", "None") in _EMPTY:
        vocab = TOKENIZER_VOCAB.get(arguments.get("tokenizer_type", ""))
        if vocab:
            words += ["--vocab-size", str(vocab)]
    return words


def _world_size(arguments: dict[str, str]) -> int:
    text = arguments.get("world_size", "")
    if not re.fullmatch(r"\d+", text) or int(text) < 1:
        raise LogError(
            f"the argument dump has no usable world_size ({text or 'missing'}); pass the launch script"
        )
    return int(text)


def launch_text(arguments: dict[str, str], devices_per_node: int | None = None) -> str:
    """A bash launch script with the dump's job on `world_size` devices."""
    world = _world_size(arguments)
    per_node = min(world, devices_per_node or 8)
    if world % per_node:
        raise LogError(
            f"world_size {world} is not a multiple of {per_node} devices per node; "
            "pass --num-npus-per-node"
        )
    launcher = ["torchrun", "--nnodes", str(world // per_node), "--nproc_per_node", str(per_node)]
    words = launcher + ["pretrain_gpt.py"] + _flags(arguments)
    return "#!/bin/bash\n" + " ".join(shlex.quote(w) for w in words) + "\n"
