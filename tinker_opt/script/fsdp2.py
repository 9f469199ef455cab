"""Reading a MindSpeed-LLM FSDP2 launch: `torchrun ... train_fsdp2.py CONFIG.yaml --section.key value ...`.

The FSDP2 backend (MindSpeed-LLM docs/en/pytorch/features/fsdp2/arguments.md; examples under
examples/fsdp2/) takes one YAML file with the sections `model`, `data`, `parallel`, `training`,
`optimization`, and launch-line overrides `--section.key value` that win over the YAML ("CLI args
take precedence over the YAML when both are set", examples/fsdp2/qwen3/pretrain_qwen3_8b_4k_fsdp2_A3.sh).
The model's shape is the Hugging Face `config.json` under `model.model_name_or_path`.

Strategy, in the Strategy schema:
* tp = `parallel.tp_size`, cp = `parallel.cp_size` (`cp_type` ulysses -> `ulysses_cp_algo`,
  ring -> `megatron_cp_algo`), ep = `parallel.ep_size` (experts split like the rest by tp: etp = tp);
  no pipeline parallelism (pp = vpp = 1);
* dp = world / (tp x cp); the parameters, gradients and optimizer states are sharded over the
  `parallel.fsdp_size` ranks: zero = 3 (0 when fsdp_size is 1). The shipped examples set fsdp_size to the whole
  data-parallel x context-parallel group (16 of 16 devices; ep_size x ep_fsdp_size = 16 in the
  GPT-OSS example), so that is how the writer sets it: fsdp_size = dp x cp and, with ep > 1,
  ep_fsdp_size = dp x cp / ep. Another fsdp_size is read with a warning;
* mbs = `training.per_device_train_batch_size` (default 8), global batch = mbs x
  `training.gradient_accumulation_steps` (default 1) x dp;
* `parallel.recompute: True` with `recompute_modules: [model.layers.{*}]` recomputes every decoder
  layer whole: full recompute of all layers of the one stage (block method, r = num_layers). With
  only sub-modules of the layers listed (`model.layers.{*}.self_attn`, as in
  examples/fsdp2/qwen3/pretrain_qwen3_14b_4k_fsdp2_A3_optimized.yaml) part of each layer is
  recomputed: read as selective recompute (with a warning: Megatron's core-attention recompute
  prices it, which leaves out the attention projections);
* `parallel.reshard_after_forward` (default True) frees each unit's gathered weights after its
  forward (ZeRO-3); False keeps them until the backward, so every layer's full weights are held at
  the peak and only one all-gather runs per micro-batch: ZeRO-2 in the cost model (gradients and
  optimizer states sharded, weights whole at the peak). ASSUMPTION: the cost model's stage 2 prices
  that gather once in the step tail (costs/zero_terms.py), where FSDP2 runs it in each micro-batch's
  forward under the prefetch; with gradient accumulation the traffic differs, the memory does not.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_opt.choices import CpAlgo, Recompute, RecomputeMethod
from tinker_opt.errors import ScriptError, StrategyError
from tinker_opt.script.expand import Field, field_text
from tinker_opt.script.hf_config import load_hf_config, model_from_hf_config
from tinker_opt.script.launch import ArgOccurrence, Launch
from tinker_opt.specs import ModelSpec
from tinker_opt.strategy import Strategy

ENTRY = "train_fsdp2.py"
DEFAULTS: dict[str, Any] = {
    "parallel.tp_size": 1,
    "parallel.fsdp_size": 1,
    "parallel.cp_size": 1,
    "parallel.cp_type": "ulysses",
    "parallel.ep_size": 1,
    "parallel.ep_fsdp_size": 1,
    "parallel.recompute": False,
    "parallel.num_to_forward_prefetch": 1,
    "parallel.num_to_backward_prefetch": 1,
    "parallel.reshard_after_forward": True,
    "parallel.recompute_modules": ["model.layers.{*}"],
    "parallel.reduce_dtype": "fp32",
    "training.per_device_train_batch_size": 8,
    "training.gradient_accumulation_steps": 1,
    "data.cutoff_len": 2048,
}
"""MindSpeed-LLM's defaults for the keys read here (docs/en/pytorch/features/fsdp2/arguments.md)."""
CP_TYPES = {"ulysses": CpAlgo.ULYSSES, "ring": CpAlgo.MEGATRON}
LAYERS = "model.layers.{*}"
"""The `recompute_modules` / `fsdp_modules` pattern naming every decoder layer."""
SELECTIVE_MODULE = LAYERS + ".self_attn"
"""What the writer recomputes for a selective strategy (the attention of every layer)."""


def is_fsdp2(launch: Launch) -> bool:
    """Whether the launch runs MindSpeed-LLM's FSDP2 entry (`train_fsdp2.py`)."""
    return field_text(launch.entry).rsplit("/", 1)[-1] == ENTRY


@dataclass(frozen=True)
class Fsdp2Config:
    """The YAML file, the launch-line overrides and the merged settings of an FSDP2 launch."""

    yaml_field: Field = field(repr=False)
    """The launch line's YAML argument (the writer points it at the tuned copy)."""
    yaml_path: Path | None
    """Where the YAML was read from (None when its text was given directly)."""
    yaml_text: str
    overrides: dict[str, ArgOccurrence] = field(repr=False)
    """`section.key` -> its last `--section.key value` on the launch line."""
    merged: dict[str, Any]
    model_config_path: Path
    model_config: dict[str, Any] = field(repr=False)
    """The model's Hugging Face config.json."""

    def get(self, key: str) -> Any:
        """A dotted key's value (launch line over YAML over MindSpeed-LLM's default)."""
        node: Any = self.merged
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node or node[part] is None:
                return DEFAULTS.get(key)
            node = node[part]
        return node


def _yaml_field(launch: Launch) -> Field:
    if not launch.positionals:
        raise ScriptError(
            f"{ENTRY} has no YAML config argument; the launch needs "
            f"`{ENTRY} CONFIG.yaml [--section.key value ...]`"
        )
    return launch.positionals[0]


def find_yaml(reference: str, script_path: Path | None) -> Path:
    """The YAML file: as written (from the working directory), then from the script's folder,
    then its file name beside the script (examples name it from the MindSpeed-LLM root)."""
    ref = Path(reference)
    candidates = [ref]
    if script_path is not None and not ref.is_absolute():
        here = script_path.parent
        candidates += [here / ref, here / ref.name]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ScriptError(
        f"the FSDP2 config {reference} (the {ENTRY} argument) is not found from the "
        "working directory or beside the script; put it there or fix the path"
    )


def _parse_yaml(text: str, source: str) -> dict[str, Any]:
    import yaml  # an FSDP2 launch's alone: every other script is read without it (issue 30)

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        raise ScriptError(f"{source}{line}: not valid YAML; fix it") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ScriptError(
            f"{source}: the FSDP2 config must be a mapping of sections (model, data, parallel, training)"
        )
    return data


def _override_value(arg: ArgOccurrence) -> Any:
    """A launch-line value typed as the YAML would type it (`16` int, `True` bool); a switch is True."""
    if not arg.values:
        return True
    text = arg.value_text or ""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _overrides(launch: Launch) -> dict[str, ArgOccurrence]:
    return {
        arg.name[2:]: arg for arg in launch.args if arg.name.startswith("--") and "." in arg.name
    }


def _merge(data: dict[str, Any], overrides: dict[str, ArgOccurrence]) -> dict[str, Any]:
    merged = copy.deepcopy(data)
    for key, arg in overrides.items():
        node = merged
        *parents, last = key.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[last] = _override_value(arg)
    return merged


def load_fsdp2_config(
    launch: Launch,
    script_path: Path | None,
    *,
    yaml_text: str | None = None,
    model_config: str | Path | None = None,
) -> Fsdp2Config:
    """The FSDP2 settings of a launch; `yaml_text` stands in for the YAML file (the writer's check)."""
    yaml_field = _yaml_field(launch)
    reference = field_text(yaml_field)
    path = None
    if yaml_text is None:
        path = find_yaml(reference, script_path)
        try:
            yaml_text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ScriptError(f"cannot read the FSDP2 config {path}: {exc}") from None
    overrides = _overrides(launch)
    merged = _merge(_parse_yaml(yaml_text, str(path or reference)), overrides)
    raw_model = merged.get("model")
    model = raw_model if isinstance(raw_model, dict) else {}
    bases = [Path.cwd()] + ([script_path.parent] if script_path is not None else [])
    hf_config, config_path = load_hf_config(model.get("model_name_or_path"), model_config, bases)
    return Fsdp2Config(
        yaml_field=yaml_field,
        yaml_path=path,
        yaml_text=yaml_text,
        overrides=overrides,
        merged=merged,
        model_config_path=config_path,
        model_config=hf_config,
    )


def _int(config: Fsdp2Config, key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ScriptError(f"{key} is {value!r}; give a positive integer")
    return value


def _flag(config: Fsdp2Config, key: str) -> bool:
    value = config.get(key)
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def read_fsdp2_model(config: Fsdp2Config, warn: Callable[[str], None]) -> ModelSpec:
    """The ModelSpec from the model's config.json and the data settings (`data.cutoff_len`)."""
    optimization = {
        **(config.merged.get("training") or {}),
        **(config.merged.get("optimization") or {}),
    }
    precision = {"fp32": "fp32", "fp16": "fp16"}.get(
        str(config.get("parallel.param_dtype")), "bf16"
    )
    return model_from_hf_config(
        config.model_config,
        seq_length=_int(config, "data.cutoff_len"),
        source=str(config.model_config_path),
        precision=precision,
        use_flash_attn=bool(optimization.get("use_flash_attn")),
        warn=warn,
    )


def recompute_modules(config: Fsdp2Config) -> list[str]:
    """`parallel.recompute_modules` as a list of module patterns (a launch-line value may be one string)."""
    value = config.get("parallel.recompute_modules")
    if isinstance(value, str):
        value = [part for part in value.replace(",", " ").split() if part]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ScriptError(
            f"parallel.recompute_modules is {value!r}; give a list of module patterns"
        )
    return value


def _recompute(config: Fsdp2Config, num_layers: int, warn: Callable[[str], None]) -> dict[str, Any]:
    """The Strategy recompute fields of `parallel.recompute` and `recompute_modules` (module docstring)."""
    if not _flag(config, "parallel.recompute"):
        return {}
    modules = recompute_modules(config)
    if LAYERS in modules:
        return {
            "recompute": Recompute.FULL,
            "recompute_method": RecomputeMethod.BLOCK,
            "recompute_num_layers": num_layers,
        }
    parts = [m for m in modules if m.startswith(LAYERS + ".")]
    if parts:
        warn(
            f"parallel.recompute_modules {parts} recompute part of each decoder layer: read as selective "
            "recompute, priced as Megatron's core-attention recompute (the projections' recompute is left out)"
        )
        return {"recompute": Recompute.SELECTIVE}
    warn(
        f"parallel.recompute_modules {modules} name no decoder layer ({LAYERS}); read as no recompute"
    )
    return {}


def _priced_defaults(config: Fsdp2Config, warn: Callable[[str], None]) -> None:
    """Warn where a setting differs from what the cost model prices (costs/zero_terms.py)."""
    for key in ("parallel.num_to_forward_prefetch", "parallel.num_to_backward_prefetch"):
        if config.get(key) != DEFAULTS[key]:
            warn(
                f"{key} is {config.get(key)!r}; the cost model prices {DEFAULTS[key]} prefetched unit "
                "(its overlap and gathered-weight memory)"
            )
    if str(config.get("parallel.reduce_dtype")) != "fp32":
        warn(
            f"parallel.reduce_dtype is {config.get('parallel.reduce_dtype')!r}; the gradient reduce-scatter "
            "is priced in fp32 (an upper bound on its time)"
        )


def read_fsdp2_strategy(
    config: Fsdp2Config, *, world: int, is_moe: bool, num_layers: int, warn: Callable[[str], None]
) -> tuple[Strategy, int]:
    """(the strategy the settings run, the global batch size) in the schema's normal form."""
    tp, cp, ep = (_int(config, f"parallel.{k}") for k in ("tp_size", "cp_size", "ep_size"))
    if world % (tp * cp):
        raise ScriptError(
            f"world size {world} is not a multiple of parallel.tp_size x cp_size = {tp * cp}; fix them"
        )
    dp = world // (tp * cp)
    fsdp = _int(config, "parallel.fsdp_size")
    if fsdp > 1 and fsdp != dp * cp:
        warn(
            f"parallel.fsdp_size {fsdp} is not the data x context parallel size {dp * cp}; read as "
            "sharded over all of them (the shipped examples shard over every rank)"
        )
    cp_type = str(config.get("parallel.cp_type"))
    if cp > 1 and cp_type not in CP_TYPES:
        raise ScriptError(
            f"parallel.cp_type is {cp_type!r}; MindSpeed-LLM's FSDP2 has ulysses and ring"
        )
    mbs = _int(config, "training.per_device_train_batch_size")
    recompute = _recompute(config, num_layers, warn)
    zero = (3 if _flag(config, "parallel.reshard_after_forward") else 2) if fsdp > 1 else 0
    if fsdp > 1:
        _priced_defaults(config, warn)
    try:
        strategy = Strategy(
            tp=tp,
            pp=1,
            dp=dp,
            cp=cp,
            cp_algo=CP_TYPES[cp_type] if cp > 1 else None,
            ep=ep if is_moe else 1,
            etp=tp if is_moe else None,
            sp=False,
            vpp=1,
            zero=zero,
            mbs=mbs,
            **recompute,
        )
    except StrategyError as exc:
        raise ScriptError(f"the FSDP2 parallel settings are inconsistent: {exc}") from None
    return strategy, mbs * _int(config, "training.gradient_accumulation_steps") * dp


def fsdp2_summary(config: Fsdp2Config) -> dict[str, Any]:
    """What `inspect` shows of an FSDP2 launch: its files and the sharding settings as read."""
    return {
        "yaml": str(config.yaml_path) if config.yaml_path else field_text(config.yaml_field),
        "model_config": str(config.model_config_path),
        "overrides": sorted(config.overrides),
        **{
            key.split(".", 1)[1]: config.get(key)
            for key in (
                "parallel.fsdp_size",
                "parallel.ep_fsdp_size",
                "parallel.reshard_after_forward",
                "parallel.recompute_modules",
                "parallel.num_to_forward_prefetch",
                "parallel.num_to_backward_prefetch",
                "training.gradient_accumulation_steps",
            )
        },
    }
