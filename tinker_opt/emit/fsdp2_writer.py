"""Writing an FSDP2 launch back with a new strategy: `apply_fsdp2`.

The strategy owns `parallel.tp_size, fsdp_size, cp_size, cp_type, ep_size, ep_fsdp_size,
recompute, reshard_after_forward` and `training.per_device_train_batch_size,
gradient_accumulation_steps` (see script/fsdp2.py for how each maps onto the Strategy schema), and
the decoder-layer entries of `parallel.recompute_modules` when they must change (full recompute
needs `model.layers.{*}`, selective `model.layers.{*}.self_attn`; other entries, such as
DeepSeek-V4's `mtp.layers.{*}.layer`, stay). A key the launch line overrides
(`--parallel.fsdp_size 16`) changes there, in place; every other owned key is set in a tuned copy
of the YAML, which the tuned script names instead of the original. The original YAML is never
touched; keys the strategy does not own stay byte for byte in both files. A key absent from both
whose value is MindSpeed-LLM's default is not added. Node and device counts follow the target as
for Megatron scripts. The result is read back and must give the target strategy.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tinker_opt.choices import CpAlgo, Recompute, RecomputeMethod
from tinker_opt.emit import script_edit
from tinker_opt.emit.script_writer import apply_cluster, with_header
from tinker_opt.emit.yaml_edit import set_yaml_values, yaml_scalar
from tinker_opt.errors import ConfigError, ScriptError, StrategyError
from tinker_opt.io_utils import write_text_atomic
from tinker_opt.script.expand import Expansion, expand_script
from tinker_opt.script.fsdp2 import (
    CP_TYPES,
    DEFAULTS,
    LAYERS,
    SELECTIVE_MODULE,
    Fsdp2Config,
    load_fsdp2_config,
    recompute_modules,
)
from tinker_opt.script.launch import Launch, find_launch
from tinker_opt.script.reader import ScriptInfo, read_script_text
from tinker_opt.script.shell import ShellSyntaxError
from tinker_opt.strategy import Strategy

_CP_TYPE_OF_ALGO: dict[CpAlgo | None, str] = {algo: name for name, algo in CP_TYPES.items()}


@dataclass(frozen=True)
class AppliedFsdp2:
    """The tuned script, the tuned YAML copy, and what the user should know."""

    text: str
    yaml_text: str
    warnings: tuple[str, ...]


def fsdp2_target(strategy: Strategy, info: ScriptInfo) -> Strategy:
    """The strategy in the reader's normal form; StrategyError when FSDP2 cannot express it."""
    if strategy.pp != 1 or strategy.vpp != 1 or strategy.num_layer_list is not None:
        raise StrategyError(
            f"pp={strategy.pp}, vpp={strategy.vpp}: MindSpeed-LLM's FSDP2 backend has "
            "no pipeline parallelism; give pp=1"
        )
    if strategy.cp > 1 and strategy.cp_algo not in _CP_TYPE_OF_ALGO:
        raise StrategyError(
            f"cp_algo {strategy.cp_algo!r}: FSDP2's cp_type is ulysses or ring "
            "(ulysses_cp_algo or megatron_cp_algo)"
        )
    layers = info.model.num_layers
    if strategy.recompute == Recompute.FULL and (
        strategy.recompute_method,
        strategy.recompute_num_layers,
    ) not in ((RecomputeMethod.UNIFORM, 1), (RecomputeMethod.BLOCK, layers)):
        raise StrategyError(
            f"full recompute of {strategy.recompute_num_layers} layer(s) "
            f"({strategy.recompute_method}): FSDP2 recomputes every decoder layer or none"
        )
    recompute = (
        {
            "recompute": Recompute.FULL,
            "recompute_method": RecomputeMethod.BLOCK,
            "recompute_num_layers": layers,
        }
        if strategy.recompute == Recompute.FULL
        else {"recompute": strategy.recompute}
    )
    sharded = (
        strategy.dist_opt and strategy.dp * strategy.cp > 1
    )  # FSDP2 shards everything or nothing
    # ZeRO-2 is reshard_after_forward False; 1 (Megatron's distributed optimizer) becomes FSDP2's 3.
    zero = (2 if strategy.zero == 2 else 3) if sharded else 0
    return Strategy(
        tp=strategy.tp,
        pp=1,
        dp=strategy.dp,
        cp=strategy.cp,
        cp_algo=strategy.cp_algo if strategy.cp > 1 else None,
        ep=strategy.ep if info.model.is_moe else 1,
        etp=strategy.tp if info.model.is_moe else None,
        sp=False,
        vpp=1,
        zero=zero,
        mbs=strategy.mbs,
        **recompute,
    )


def _recompute_modules(target: Strategy, modules: list[str]) -> list[str] | None:
    """The `recompute_modules` list the target needs, or None when the current one reads right
    (script/fsdp2.py: full iff `model.layers.{*}` is listed, selective iff only its sub-modules are)."""
    parts = [m for m in modules if m.startswith(LAYERS + ".")]
    if target.recompute == Recompute.FULL and LAYERS not in modules:
        wanted = [LAYERS]
    elif target.recompute == Recompute.SELECTIVE and (LAYERS in modules or not parts):
        wanted = [SELECTIVE_MODULE]
    else:
        return None
    return wanted + [m for m in modules if m != LAYERS and m not in parts]


def fsdp2_values(
    target: Strategy, *, global_batch_size: int, is_moe: bool, modules: list[str] | None = None
) -> dict[str, Any]:
    """The owned `section.key` values of a (normal-form) strategy; `modules` is the launch's
    current `recompute_modules` (MindSpeed-LLM's default when None)."""
    per_step = target.dp * target.mbs
    if global_batch_size % per_step:
        raise StrategyError(
            f"global batch {global_batch_size} is not a multiple of dp x mbs = {per_step}; "
            "FSDP2 sets it as per_device_train_batch_size x gradient_accumulation_steps x dp"
        )
    shard = target.dp * target.cp if target.dist_opt else 1
    values: dict[str, Any] = {
        "parallel.tp_size": target.tp,
        "parallel.fsdp_size": shard,
        "parallel.cp_size": target.cp,
        "parallel.recompute": target.recompute != Recompute.NONE,
        "training.per_device_train_batch_size": target.mbs,
        "training.gradient_accumulation_steps": global_batch_size // per_step,
    }
    if target.dist_opt:
        values["parallel.reshard_after_forward"] = target.zero == 3
    wanted = _recompute_modules(target, modules if modules is not None else [LAYERS])
    if wanted is not None:
        values["parallel.recompute_modules"] = wanted
    if target.cp > 1:
        values["parallel.cp_type"] = _CP_TYPE_OF_ALGO[target.cp_algo]
    if is_moe:
        values["parallel.ep_size"] = target.ep
        values["parallel.ep_fsdp_size"] = (
            shard // target.ep if target.ep > 1 and shard % target.ep == 0 else 1
        )
    return values


def _config(info: ScriptInfo) -> Fsdp2Config:
    """The FSDP2 settings of a script the writer was handed as an FSDP2 launch."""
    assert info.fsdp2 is not None, "not an FSDP2 launch"
    return info.fsdp2


def _in_yaml(info: ScriptInfo, key: str) -> bool:
    section, name = key.split(".", 1)
    data = yaml.safe_load(_config(info).yaml_text) or {}
    return isinstance(data.get(section), dict) and name in data[section]


def _split_values(
    info: ScriptInfo, values: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(launch-line overrides to change, YAML keys to set); defaults absent from both are skipped."""
    line, in_yaml = {}, {}
    overrides = _config(info).overrides
    for key, value in values.items():
        if key in overrides and isinstance(value, list):
            raise ScriptError(
                f"--{key} on the launch line must become {value}; the writer sets lists only "
                "in the YAML: move it there or set it by hand"
            )
        if key in overrides:
            line[key] = value
        elif _in_yaml(info, key) or value != DEFAULTS.get(key):
            in_yaml[key] = value
    return line, in_yaml


def _reader(info: ScriptInfo, yaml_text: str):
    config = _config(info)

    def read(text: str) -> ScriptInfo:
        return read_script_text(
            text,
            info.path.name if info.path else "script.sh",
            path=info.path,
            fsdp2_yaml=yaml_text,
            model_config=config.model_config_path,
        )

    return read


@dataclass(frozen=True)
class _Layout:
    """Where the launch's arguments are in a script text: enough to edit it. Unlike a ScriptInfo it
    checks no strategy: between edits the old parallel sizes need not fit the new device count
    (cp_size 32 in the YAML while NNODES already went from 4 to 1)."""

    launch: Launch
    expansion: Expansion
    fsdp2: Fsdp2Config


def _layout_reader(info: ScriptInfo, yaml_text: str):
    def read(text: str) -> _Layout:
        name = info.path.name if info.path else "script.sh"
        try:
            expansion = expand_script(text, name)
        except ShellSyntaxError as exc:
            raise ScriptError(
                f"the tuned {name} does not parse ({exc}); set the values by hand"
            ) from None
        launch = find_launch(expansion)
        return _Layout(
            launch,
            expansion,
            load_fsdp2_config(
                launch, info.path, yaml_text=yaml_text, model_config=_config(info).model_config_path
            ),
        )

    return read


def apply_fsdp2(
    info: ScriptInfo,
    strategy: Strategy,
    *,
    nnodes: int,
    nproc_per_node: int,
    yaml_reference: str | Path,
    global_batch_size: int | None = None,
    header: Sequence[str] = (),
) -> AppliedFsdp2:
    """The tuned script (naming `yaml_reference` as its config) and the tuned YAML text."""
    if info.fsdp2 is None:
        raise ScriptError("not an FSDP2 launch (train_fsdp2.py); use apply_strategy")
    target = fsdp2_target(strategy, info)
    world = nnodes * nproc_per_node
    if target.world_size != world:
        raise StrategyError(
            f"tp x cp x dp = {target.world_size} but the target has {world} devices; "
            "make them equal"
        )
    gbs = global_batch_size or info.train.global_batch_size
    values = fsdp2_values(
        target,
        global_batch_size=gbs,
        is_moe=info.model.is_moe,
        modules=recompute_modules(info.fsdp2),
    )
    line, in_yaml = _split_values(info, values)
    yaml_text = set_yaml_values(info.fsdp2.yaml_text, in_yaml)
    layout = _layout_reader(info, info.fsdp2.yaml_text)
    tuned, warnings = apply_cluster(info.text, nnodes, nproc_per_node, read=layout)
    current = layout(tuned)
    edits = [
        script_edit.value_edit(
            tuned, current.fsdp2.overrides[key], yaml_scalar(value), current.expansion
        )
        for key, value in line.items()
    ]
    loc = script_edit.value_location(
        (current.fsdp2.yaml_field,), current.expansion, prefer_assignment=False
    )
    if loc is None:
        raise ScriptError(
            "the YAML argument of train_fsdp2.py is computed by the script; point it at the "
            f"tuned copy {yaml_reference} by hand"
        )
    edits.append(script_edit.Edit(loc.start, loc.end, shlex.quote(str(yaml_reference))))
    tuned = with_header(script_edit.apply_edits(tuned, [e for e in edits if e is not None]), header)
    _check_reads_back(info, tuned, yaml_text, (target, gbs, nnodes, nproc_per_node))
    return AppliedFsdp2(tuned, yaml_text, tuple(warnings))


def _check_reads_back(info: ScriptInfo, tuned: str, yaml_text: str, expected: tuple) -> None:
    """The tuned launch and YAML read back as (strategy, global batch, nodes, devices per node)."""
    check = _reader(info, yaml_text)(tuned).train
    got = (check.strategy, check.global_batch_size, check.nnodes, check.nproc_per_node)
    if got != expected:
        raise ScriptError(
            f"the tuned FSDP2 launch reads back as {got[0].label()} (global batch {got[1]}) on "
            f"{got[2]}x{got[3]} devices instead of {expected[0].label()} (global batch "
            f"{expected[1]}); set the values by hand"
        )


def write_fsdp2_yaml(path: str | Path, text: str, *, original: Path | None) -> Path:
    """Write the tuned YAML copy atomically; never over the original YAML."""
    target = Path(path)
    if original is not None and (target.resolve() == original.resolve()):
        raise ConfigError(
            f"the tuned YAML {target} would replace the original config; choose another -o path"
        )
    return write_text_atomic(target, text)
