"""Reading a launch script: `read_script` -> ScriptInfo (ModelSpec + TrainSpec + warnings).

Nothing in the script is executed: shell.py lexes it, expand.py expands it in order, launch.py
finds the training launch, model_args.py / strategy_args.py turn its arguments into the specs.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_opt.errors import ScriptError
from tinker_opt.script import versions
from tinker_opt.script.expand import Expansion, Scalar, expand_script
from tinker_opt.script.flags import (
    unknown_flags,
    unknown_warning,
    unpriced_flags,
    unpriced_warning,
)
from tinker_opt.script.fsdp2 import (
    Fsdp2Config,
    fsdp2_summary,
    is_fsdp2,
    load_fsdp2_config,
    read_fsdp2_model,
    read_fsdp2_strategy,
)
from tinker_opt.script.knob_report import knob_section
from tinker_opt.script.launch import Launch, find_launch
from tinker_opt.script.model_args import (
    read_model,
    script_num_layers,
    unpriced_model_warnings,
)
from tinker_opt.script.shell import ShellSyntaxError
from tinker_opt.script.train_args import train_spec
from tinker_opt.specs import FrameworkInfo, ModelSpec, TrainSpec

# Flags and names only MindSpeed-LLM / ModelLink scripts use (Megatron-LM has none of them).
_MINDSPEED_MARKERS = re.compile(
    r"NPUS_PER_NODE|HCCL_|ASCEND|--use-fused-rmsnorm|--use-fused-swiglu|"
    r"--use-fused-rotary-pos-emb|--use-mc2|--use-ascend-mc2|--tokenizer-name-or-path|PretrainedFromHF|"
    r"--context-parallel-algo|--num-layer-list|posttrain_gpt|\bmsrun\b|--noop-layers|"
    r"--reuse-fp32-param|--moe-permutation-async-comm|pretrain_llama\.py|--prompt-type|"
    r"--is-instruction-dataset|--moe-tp-extend-ep|npu"
)
_SIZE_RE = re.compile(r"^(\d+(?:point\d+|\.\d+)?|\d+x\d+(?:point\d+)?)([bmt])$", re.I)
_NAME_PREFIXES = {
    "pretrain",
    "tune",
    "train",
    "posttrain",
    "finetune",
    "sft",
    "dpo",
    "run",
    "launch",
    "examples",
    "example",
    "prm",
    "rm",
    "orm",
    "ppo",
    "grpo",
    "lora",
    "full",
}


@dataclass(frozen=True)
class ScriptInfo:
    """What a launch script says: the model, the job, and where each argument came from."""

    path: Path | None
    text: str
    model: ModelSpec
    train: TrainSpec
    warnings: tuple[str, ...]
    num_layers_in_script: int
    """`--num-layers` as written (noop layers included): the L of the vpp and layer-list flags."""
    version_range: versions.VersionRange
    """What the flags tell of the framework version (bounds; exact only when given)."""
    launch: Launch = field(repr=False, compare=False)
    expansion: Expansion = field(repr=False, compare=False)
    fsdp2: Fsdp2Config | None = field(default=None, repr=False, compare=False)
    """The YAML settings and overrides of a MindSpeed-LLM FSDP2 launch (None for Megatron-style scripts)."""


def _flavour(text: str, launch: Launch) -> str:
    if _MINDSPEED_MARKERS.search(text):
        return "mcore" if launch.has("--use-mcore-models") else "legacy"
    return "megatron"


TE_UNFUSED_BACKENDS = ("unfused", "local")
"""`--attention-backend` values that keep the s x s attention scores (megatron/core/transformer/
enums.py AttnBackend; the default is auto)."""


def _names_te(launch: Launch, flavour: str) -> bool:
    """A Megatron-LM script that names Transformer Engine: `--transformer-impl transformer_engine`
    or `--use-mcore-models`, whose default impl it is (not `--use-legacy-models`)."""
    if flavour != "megatron" or launch.has("--use-legacy-models"):
        return False
    impl = launch.value("--transformer-impl")
    return impl == "transformer_engine" or (impl is None and launch.has("--use-mcore-models"))


def _te_attention(model: ModelSpec, launch: Launch, flavour: str) -> ModelSpec:
    """Megatron-LM scripts that name Transformer Engine (`_names_te`): TE's DotProductAttention
    picks FlashAttention or cuDNN's fused attention itself under `--attention-backend auto`
    (transformer_engine/pytorch/attention/dot_product_attention/utils.py get_attention_backend),
    neither keeping the s x s scores: priced as flash attention. Devices below sm80, where TE
    falls back to unfused attention, undo it (verbs/common.model_on_device)."""
    if model.use_flash_attn or not _names_te(launch, flavour):
        return model
    if launch.value("--attention-backend") in TE_UNFUSED_BACKENDS:
        return model
    return dataclasses.replace(model, use_flash_attn=True)


def _te_kernels(model: ModelSpec, launch: Launch, flavour: str) -> ModelSpec:
    """The fused kernels Megatron-Core runs by default with Transformer Engine (`_names_te`), without
    MindSpeed's `--use-fused-*` flags (NVIDIA/Megatron-LM megatron/training/arguments.py):
    RMSNorm is TE's fused kernel (the TE layer spec's TENorm / TELayerNormColumnParallelLinear);
    SwiGLU is megatron-core's fused `bias_swiglu_impl` unless `--no-bias-swiglu-fusion`
    (dest bias_swiglu_fusion, on by default); rotary embeddings are fused unless
    `--no-rope-fusion` (dest apply_rope_fusion, on by default)."""
    if not _names_te(launch, flavour):
        return model
    ops = {"rmsnorm"}
    if not launch.has("--no-bias-swiglu-fusion"):
        ops.add("swiglu")
    if not launch.has("--no-rope-fusion"):
        ops.add("rope")
    return dataclasses.replace(model, fused_kernels=tuple(ops | set(model.fused_kernels)))


def _variable_int(expansion: Expansion, *names: str) -> int | None:
    for name in names:
        value = expansion.variables.get(name)
        if isinstance(value, Scalar):
            text = "".join(seg.text for seg in value.segs).strip()
            if text.isdigit():
                return int(text)
    return None


def _cluster(launch: Launch, expansion: Expansion, warn) -> tuple[int, int]:
    """(nnodes, nproc_per_node) from the launcher's arguments, else the usual variables."""

    def number(text: str | None) -> int | None:
        if text is None:
            return None
        text = text.split(":")[-1]  # torchrun's elastic MIN:MAX
        return int(text) if text.isdigit() else None

    if launch.launcher == "msrun":
        world = number(launch.launcher_value("--worker_num"))
        local = number(launch.launcher_value("--local_worker_num"))
        nodes = world // local if world and local and world % local == 0 else None
    else:
        nodes = number(launch.launcher_value("--nnodes", "--num_nodes"))
        local = number(launch.launcher_value("--nproc_per_node", "--nproc-per-node", "--num_gpus"))
    nodes = nodes or _variable_int(expansion, "NNODES", "NUM_NODES")
    local = local or _variable_int(expansion, "NPUS_PER_NODE", "GPUS_PER_NODE")
    if not nodes or not local:
        warn(
            "node or device count not found on the launcher line; read as "
            f"{nodes or 1} node(s) x {local or 1} device(s)"
        )
    return nodes or 1, local or 1


def prediction_warnings(launch: Launch, model: ModelSpec, *, fsdp2: bool = False) -> list[str]:
    """What the prediction leaves out, for the terminal, search.log and summary.json: the flags
    read but not priced, the flags the reader does not know (each once, in a warning of their
    own), and model settings read but not priced (dispatcher, MTP). An FSDP2 launch's arguments
    are YAML overrides, not Megatron flags: only the model's are named."""
    flag_warnings = [] if fsdp2 else [unpriced_warning(launch), unknown_warning(launch)]
    return [w for w in flag_warnings if w] + unpriced_model_warnings(model)


def _read_fsdp2(
    text: str,
    name: str,
    path: Path | None,
    expansion: Expansion,
    launch: Launch,
    warnings: list[str],
    fsdp2_yaml: str | None,
    model_config,
) -> ScriptInfo:
    """The ScriptInfo of a MindSpeed-LLM FSDP2 launch (settings in its YAML and overrides)."""
    config = load_fsdp2_config(launch, path, yaml_text=fsdp2_yaml, model_config=model_config)
    model = read_fsdp2_model(config, warnings.append)
    nodes, local = _cluster(launch, expansion, warnings.append)
    strategy, gbs = read_fsdp2_strategy(
        config,
        world=nodes * local,
        is_moe=model.is_moe,
        num_layers=model.num_layers,
        warn=warnings.append,
    )
    version_range = versions.resolve(None, "", "fsdp2")
    framework = FrameworkInfo(
        flavour="fsdp2", version=None, launcher=launch.launcher, entry=launch.entry_source
    )
    train = TrainSpec(
        micro_batch_size=strategy.mbs,
        nnodes=nodes,
        nproc_per_node=local,
        strategy=strategy,
        global_batch_size=gbs,
        framework=framework,
        is_full_tune=config.get("training.stage") == "sft",
    )
    return ScriptInfo(
        path=path,
        text=text,
        model=model,
        train=train,
        warnings=tuple(warnings),
        num_layers_in_script=model.num_layers,
        version_range=version_range,
        launch=launch,
        expansion=expansion,
        fsdp2=config,
    )


def read_script_text(
    text: str,
    name: str = "script.sh",
    *,
    path: Path | None = None,
    fsdp2_yaml: str | None = None,
    model_config: str | Path | None = None,
) -> ScriptInfo:
    """Read a launch script given as text (see `read_script`).

    For an FSDP2 launch, `fsdp2_yaml` stands in for its YAML file's text and `model_config` for the
    model's config.json (`--model-config`); both are ignored for Megatron-style scripts.
    """
    warnings: list[str] = []
    try:
        expansion = expand_script(text, name)
    except ShellSyntaxError as exc:
        raise ScriptError(
            f"{name}: {exc}; fix the shell syntax (bash -n {name} shows it)"
        ) from None
    if "\r\n" in text:
        warnings.append("the script has CRLF line endings; bash on Linux needs LF (dos2unix)")
    warnings.extend(expansion.warnings)
    launch = find_launch(expansion)
    if is_fsdp2(launch):
        return _read_fsdp2(text, name, path, expansion, launch, warnings, fsdp2_yaml, model_config)
    warn = warnings.append
    model = read_model(launch, warn)
    nodes, local = _cluster(launch, expansion, warn)
    flavour = _flavour(text, launch)
    model = _te_kernels(_te_attention(model, launch, flavour), launch, flavour)
    total = script_num_layers(launch)
    version_range = versions.resolve(None, text, flavour)
    warnings.extend(prediction_warnings(launch, model))
    train = train_spec(name, launch, model, nodes, local, flavour, total, version_range, warn)
    return ScriptInfo(
        path=path,
        text=text,
        model=model,
        train=train,
        warnings=tuple(warnings),
        num_layers_in_script=total,
        version_range=version_range,
        launch=launch,
        expansion=expansion,
    )


def read_script(path: str | Path, *, model_config: str | Path | None = None) -> ScriptInfo:
    """Read a launch script file without executing it; ScriptError names what is wrong.

    `model_config` is the model's config.json for an FSDP2 launch whose model path is not here.
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise ScriptError(f"launch script {path} not found; check the path") from None
    except IsADirectoryError:
        raise ScriptError(f"{path} is a folder; give the launch script (.sh) inside it") from None
    except UnicodeDecodeError:
        raise ScriptError(f"{path} is not UTF-8 text; convert it (iconv -f GBK -t UTF-8)") from None
    except OSError as exc:
        raise ScriptError(
            f"cannot read launch script {path}: {exc.strerror}; check its permissions"
        ) from None
    return read_script_text(text, path.name, path=path, model_config=model_config)


def inspect_dict(info: ScriptInfo) -> dict[str, Any]:
    """The `inspect --json` object: model, cluster, strategy, the knobs (every registry record:
    value read, its flags the script has, searched, where priced; script/knob_report.py) and
    framework; the framework part also lists the launch flags read but not priced and those the
    reader does not know (script/flags.py)."""
    model = info.model.to_dict()
    model["micro_batch_size"] = info.train.micro_batch_size
    model["global_batch_size"] = info.train.global_batch_size
    fw = info.train.framework
    framework: dict[str, Any] = {
        "flavour": fw.flavour,
        "version": fw.version,
        "version_range": info.version_range.describe(),
        "launcher": fw.launcher,
        "entry": fw.entry,
        "is_full_tune": info.train.is_full_tune,
        "loads_checkpoint": info.train.loads_checkpoint,
        "swap_optimizer_times": info.train.swap_optimizer_times,
        "overlap_p2p_comm": info.train.overlap_p2p_comm,
        "reuse_fp32_param": info.train.reuse_fp32_param,
        "swap_attention": info.train.swap_attention,
        "optimizer_precision": dataclasses.asdict(info.train.optimizer_precision),
        "recompute_activation_function": info.train.recompute_activation_function,
        "recompute_activation_function_num_layers": info.train.recompute_activation_function_num_layers,
        "recompute_modules": info.train.recompute_modules,
    }
    if info.fsdp2 is not None:
        framework["fsdp2"] = fsdp2_summary(info.fsdp2)
    megatron_style = info.fsdp2 is None
    framework["not_priced_flags"] = unpriced_flags(info.launch) if megatron_style else []
    framework["unknown_flags"] = unknown_flags(info.launch) if megatron_style else []
    return {
        "model": model,
        "cluster": {"nnodes": info.train.nnodes, "nproc_per_node": info.train.nproc_per_node},
        "strategy": info.train.strategy.to_dict(),
        "knobs": knob_section(info),
        "framework": framework,
    }


def labels_from_filename(path: str | Path) -> tuple[str, str]:
    """(model name, size label) from a script name: `pretrain_llama2_7b_ptd.sh` -> ("llama2", "7b")."""
    stem = Path(path).name
    stem = stem[:-3] if stem.endswith(".sh") else stem
    tokens = [t for t in re.split(r"[_\-\s]+", stem.strip()) if t]
    for i, token in enumerate(tokens):
        match = _SIZE_RE.match(token)
        if match:
            size = (match.group(1).lower().replace("point", ".") + match.group(2)).lower()
            names = [t for t in tokens[:i] if t.lower() not in _NAME_PREFIXES]
            return ("_".join(names).lower() or "model"), size
    return "model", "unknown"
