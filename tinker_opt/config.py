"""Settings: one table, from which the config loader, the CLI options and the settings classes come.

`TABLE` lists every setting once: its key (Tinker's snake_case spelling), kind, default, unit,
help and the sections (verbs) that take it. From it follow
* the JSON config loader (Tinker's three sections `profile`, `search`, `simulate`, and `comm` for
  `profile-comm`; Tinker's own example config, every key present and many `null`, loads
  unchanged: `null` means "not set"),
* the typer options of each verb (cli.py: `--kebab-case` and Tinker's `--snake_case`), and
* one frozen dataclass per section (`ProfileSettings`, `SearchSettings`, `SimulateSettings`,
  `CommSettings`), so a mistyped setting name is an AttributeError, never a silent None.
Precedence: built-in default < config file < command line, resolved in `resolve`. An unknown key,
a wrong type or a missing required value is a one-line `ConfigError` naming the key.
Adding a setting is one `_s(...)` line in `TABLE`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_opt.choices import Recompute
from tinker_opt.errors import ConfigError
from tinker_opt.knobs import CHOICES

SECTIONS = ("profile", "search", "simulate", "comm")


def _to_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError("an integer")
    return int(value)


def _to_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError("a number")
    return float(value)


def _to_str(value: Any) -> str:
    if not isinstance(value, (str, Path)):
        raise TypeError("a string")
    return str(value)


def _to_bool(value: Any) -> bool:
    """Booleans, 0/1 (Tinker's switches) and the words true/false; never 'False' meaning True."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("0", "1", "true", "false", "yes", "no"):
        return value.strip().lower() in ("1", "true", "yes")
    raise TypeError("true/false or 0/1")


def _to_int_list(value: Any) -> tuple[int, ...]:
    """`4,4,4,4` (Tinker's command-line form) or a JSON list of integers."""
    if isinstance(value, str):
        parts = [p for p in value.replace(" ", "").split(",") if p]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        raise TypeError("a comma-separated list of integers")
    return tuple(_to_int(p) for p in parts)


def _to_recompute(value: Any) -> str:
    """Tinker's 0/1 (off / full) or one of the recompute record's values (none | selective | full)."""
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return (Recompute.FULL if value else Recompute.NONE).value
    kinds = CHOICES["recompute"].choices
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("0", "1"):
            return (Recompute.FULL if word == "1" else Recompute.NONE).value
        if word in kinds:
            return word
    raise TypeError(f"{' | '.join(kinds)} (or 0/1)")


def _to_zero(value: Any) -> int:
    """A ZeRO stage of the zero record (0..3); Tinker's 0/1 and true/false (the distributed
    optimizer off / on)."""
    stages = CHOICES["zero"].choices
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, str)) and str(value).strip() in tuple(map(str, stages)):
        return int(str(value).strip())
    raise TypeError(f"a ZeRO stage {', '.join(map(str, stages[:-1]))} or {stages[-1]}")


CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "int": _to_int,
    "float": _to_float,
    "str": _to_str,
    "bool": _to_bool,
    "int_list": _to_int_list,
    "recompute": _to_recompute,
    "zero": _to_zero,
}


@dataclass(frozen=True)
class Setting:
    """One configurable value: key (Tinker's snake_case spelling), kind, default, unit, help, sections."""

    key: str
    kind: str
    """int | float | str | bool | int_list | recompute | zero (a key of CONVERTERS)."""
    default: Any
    help: str
    sections: tuple[str, ...]
    """The config-file sections (and so the verbs) that take it; `all` takes profile's and search's."""
    unit: str = ""
    positive: bool = False
    aliases: tuple[str, ...] = ()
    """Extra command-line spellings (`--tp` for `simu_tp`)."""
    switch: bool = False
    """On the command line a switch without a value (given: True; absent: not set)."""

    def convert(self, value: Any, origin: str) -> Any:
        try:
            converted = CONVERTERS[self.kind](value)
        except (TypeError, ValueError) as exc:
            expected = exc.args[0] if isinstance(exc, TypeError) and exc.args else self.kind
            raise ConfigError(f"{origin}: '{self.key}' must be {expected}, got {value!r}") from None
        if self.positive and converted is not None:
            values = converted if isinstance(converted, tuple) else (converted,)
            if any(v <= 0 for v in values):
                raise ConfigError(f"{origin}: '{self.key}' must be positive, got {value!r}")
        return converted

    @property
    def flags(self) -> tuple[str, ...]:
        """Command-line spellings: --kebab-case, Tinker's --snake_case, then the aliases."""
        kebab, snake = "--" + self.key.replace("_", "-"), "--" + self.key
        return (kebab,) + ((snake,) if snake != kebab else ()) + self.aliases

    @property
    def help_text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        return self.help if self.default is None else f"{self.help} (default: {self.default}{unit})"


def _s(
    key: str,
    kind: str,
    default: Any,
    help_text: str,
    sections: str,
    *,
    unit: str = "",
    positive: bool = False,
    aliases: tuple[str, ...] = (),
    switch: bool = False,
) -> Setting:
    """A TABLE row; `sections` is a space-separated list (profile search simulate)."""
    return Setting(
        key, kind, default, help_text, tuple(sections.split()), unit, positive, aliases, switch
    )


P, S, M, C = "profile", "search", "simulate", "comm"
# A table: one row per line reads better than the formatter's layout.
# fmt: off
TABLE = (
    # profile
    _s("pretrain_script_path", "str", None, "The training launch script (.sh) to profile.", P),
    _s("model_name", "str", None, "Model label for output names (default: from the script's file name).", P),
    _s("model_size", "str", None, "Model size label, e.g. 7b (default: from the script's file name).", P),
    _s("version", "str", None, "Framework version (1.0, 1.1, 1.2, 1.0.0, 2.0.0, 2.3.0, ...); detected from the script if unset.", f"{P} {S}"),
    _s("max_npu", "int", None, "Largest tensor-parallel size to profile (devices per node, default: the script's, else the hardware description's, else 8; also the script's tp and --prof-tp multiples of it, across nodes).", P, positive=True),
    _s("tp_nodes", "int", 1, "Largest number of nodes one tensor-parallel group may span (profiled, so searched; 1: tp within a node).", P, positive=True),
    _s("max_ep", "int", None, "Largest expert-parallel size to profile (default: every divisor of the expert count).", P, positive=True),
    _s("max_mbs", "int", 8, "Largest micro-batch size to profile.", P, positive=True),
    _s("prof_tp", "int_list", None, "Comma list restricting the profiled tp values, e.g. 1,2,4.", P, positive=True),
    _s("prof_sp", "int_list", None, "Comma list restricting sequence parallel, e.g. 0,1.", P),
    _s("save_path", "str", "./profiled_data", "Folder that receives profiled-data-<model>-<size>-<time>/.", P),
    _s("prof_path", "str", None, "Profile folder to write or resume (default: a new one under save_path).", P),
    _s("task_id", "str", None, "Suffix appended to the profile folder name.", P),
    _s("is_full_tune", "bool", None, "Treat the script as a full-parameter fine-tune (detected from the script if unset).", P, switch=True),
    _s("device", "str", "auto", "Profiling device: auto | npu | cuda | cpu | analytic.", P),
    _s("repeats", "int", 5, "Timed repeats per block (median reported).", P, positive=True),
    _s("warmup", "int", 2, "Untimed warm-up runs per block (the memory pass counts as the first).", P),
    _s("devices", "int", None, "Local devices to profile on at once, one worker process each (default: every device; 1 on the CPU; with --device analytic: tracing processes, default every CPU).", P, positive=True),
    _s("blocks", "str", "reference", "Decoder-layer source: reference | megatron-core (needs the megatron extra).", P),
    _s("moe_load_imbalance", "float", 1.25, "MoE, dropless routing: tokens the busiest EP rank computes / the mean (profile/shape.py expert_load; --moe-router-force-load-balancing in the script means 1).", P, positive=True),
    # profile-comm: the collectives of the user's cluster, under torchrun (or on this node)
    _s("output_dir", "str", "./comm_profile", "Folder that receives comm.csv, comm_world.csv, meta.json and profile-comm.log (rank 0 writes).", C),
    _s("device", "str", "auto", "Device of the ranks: auto | npu (hccl) | cuda (nccl) | cpu (gloo).", C),
    _s("max_bytes", "int", None, "Largest buffer of a collective (sizes 16 KiB x 2^i up to it; default 256 MiB, 16 MiB on the CPU).", C, unit="bytes", positive=True),
    _s("warmup", "int", 2, "Untimed calls of each collective and size.", C),
    _s("repeats", "int", 5, "Timed calls of each collective and size, the sizes interleaved (the fastest reported).", C, positive=True),
    _s("timeout", "float", 300, "Longest wait of a rank (joining, a collective, a barrier) before the run stops with an error.", C, unit="s", positive=True),
    _s("devices", "int", None, "Without torchrun: processes on this node (default: every device; 2 on the CPU).", C, positive=True),
    # search and simulate
    _s("profiled_data_path", "str", None, "Profiled-data folder (a bare name is looked up under ./profiled_data).", f"{S} {M}"),
    _s("pretrain_script_path_search", "str", None, "Script to rewrite into tuned configs (default: the profiled one).", S),
    _s("pretrain_script_path", "str", None, "Launch script: model (for Tinker folders), global batch size, nodes (default: the profiled one).", M),
    _s("num_layers", "int", None, "Number of layers (default: the profiled model's).", M, positive=True),
    _s("global_batch_size", "int", None, "Global batch size in samples (default: the script's).", f"{S} {M}", positive=True),
    _s("num_nodes", "int", None, "Nodes of the target cluster (default: the script's; simulate: else the strategy's).", f"{S} {M}", positive=True),
    _s("num_npus_per_node", "int", None, "Devices per node of the target cluster (default: the script's, else the hardware description's, else 8).", f"{S} {M}", positive=True),
    _s("memory_limit", "float", None, "Modelled memory budget per device (weights, grads, optimizer, activations, transients); default: the device's memory (--hardware or the profile's description) less what the framework keeps, else 57000.", f"{S} {M}", unit="MB", positive=True),
    _s("inter_node_bandwidth", "float", None, "Inter-node bandwidth per device (overrides the profile).", f"{S} {M}", unit="GB/s", positive=True),
    _s("model_config", "str", None, "FSDP2 launches: the model's Hugging Face config.json, when model.model_name_or_path is not on this machine.", f"{P} {S} {M}"),
    _s("hardware", "str", None, "Hardware description (name or JSON file): communication figures, and the analytic device.", f"{P} {S} {M}"),
    # search
    _s("cpus", "int", 2, "Solver workers / enumeration processes.", S, positive=True),
    _s("output_dir", "str", "./results", "Folder that receives the results folder.", S),
    _s("solver", "str", "cpsat", "cpsat | milp | enum.", S),
    _s("time_limit", "float", 60, "Solver time limit.", S, unit="s", positive=True),
    _s("top_k", "int", 10, "Number of ranked strategies (and tuned scripts) to write.", S, positive=True),
    _s("headroom", "float", 10, "Memory the 'headroom' pick leaves free, in percent of --memory-limit.", S, unit="%"),
    _s("max_mbs", "int", None, "Largest micro-batch size the search may choose.", S, positive=True),
    _s("allow_fp8", "bool", False, "Let the search choose FP8 (Transformer Engine --fp8-format hybrid, delayed scaling) besides the script's precision; needs an analytic profile and a device with FP8.", S, switch=True),
    _s("log", "str", None, "Training log of a run of this machine: calibrate --hardware on it, then search an analytic profile re-timed on the fit.", S),
    # simulate: the strategy (none given, with a launch script: the script's own strategy; else 1, off, none)
    _s("simu_tp", "int", None, "Tensor-parallel size (default 1).", M, positive=True, aliases=("--tp",)),
    _s("simu_pp", "int", None, "Pipeline-parallel size (default 1).", M, positive=True, aliases=("--pp",)),
    _s("simu_ep", "int", None, "Expert-parallel size (default 1).", M, positive=True, aliases=("--ep",)),
    _s("simu_etp", "int", None, "Expert tensor-parallel size (default: tp).", M, positive=True, aliases=("--etp",)),
    _s("simu_sp", "bool", None, "Sequence parallel (0/1, default 0).", M, aliases=("--sp",)),
    _s("simu_cp", "int", None, "Context-parallel size (default 1).", M, positive=True, aliases=("--cp",)),
    _s("cp_algo", "str", None, "Context-parallel algorithm (default megatron_cp_algo when cp > 1).", M),
    _s("simu_vpp", "int", None, "Virtual pipeline chunks per pipeline rank (default 1).", M, positive=True, aliases=("--vpp",)),
    _s("zero", "zero", None, "ZeRO stage 0..3 (1 = the distributed optimizer; Tinker's 0/1; default 0).", M),
    _s("dist_opt", "bool", None, "Distributed optimizer (0/1): zero 1 when on, 0 when off; must agree with --zero.", M),
    _s("micro_batch_size", "int", None, "Micro-batch size (default 1).", M, positive=True, aliases=("--mbs",)),
    _s("num_layer_list", "int_list", None, "Layers per pipeline stage, e.g. 4,4,4,4.", M, positive=True),
    _s("recompute", "recompute", None, "none | selective | full (Tinker's 0/1 = none/full; default none).", M),
    _s("recompute_num_layers", "int", None, "Layers per stage fully recomputed (default: all; uniform: 1).", M,
       positive=True),
    _s("recompute_method", "str", None, "Full recompute method: block | uniform (Megatron's; default block).", M),
)
# fmt: on
"""Every setting. A key may have one row per meaning (max_mbs: what to profile / what to search)."""

SETTINGS: dict[str, tuple[Setting, ...]] = {
    section: tuple(s for s in TABLE if section in s.sections) for section in SECTIONS
}
_TYPES = {
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "int_list": tuple[int, ...],
    "recompute": str,
    "zero": int,
}


def setting(section: str, key: str) -> Setting:
    """The Setting of `section` named `key`."""
    for item in SETTINGS[section]:
        if item.key == key:
            return item
    raise KeyError(f"{section}.{key}")


def _settings_class(section: str) -> type:
    """A frozen dataclass with one field per setting of `section`, the table's default as default."""
    fields = [
        (
            s.key,
            _TYPES[s.kind] | None,
            dataclasses.field(default=s.default, metadata={"setting": s}),
        )
        for s in SETTINGS[section]
    ]
    cls = dataclasses.make_dataclass(
        f"{section.capitalize()}Settings",
        fields,
        frozen=True,
        kw_only=True,
        namespace={"section": section, "replace": dataclasses.replace},
    )
    cls.__doc__ = f"The resolved `{section}` settings (config.TABLE); one attribute per setting."
    cls.__module__ = __name__
    return cls


if TYPE_CHECKING:  # built at run time from TABLE: the type checker sees their attributes as Any
    ProfileSettings = Any
    SearchSettings = Any
    SimulateSettings = Any
    CommSettings = Any
else:
    ProfileSettings = _settings_class("profile")
    SearchSettings = _settings_class("search")
    SimulateSettings = _settings_class("simulate")
    CommSettings = _settings_class("comm")
SETTINGS_CLASSES: dict[str, type] = {
    "profile": ProfileSettings,
    "search": SearchSettings,
    "simulate": SimulateSettings,
    "comm": CommSettings,
}
VERB_SECTIONS: dict[str, tuple[str, ...]] = {
    "profile": (P,),
    "search": (S,),
    "simulate": (M,),
    "all": (P, S),
    "profile-comm": (C,),
}
"""The sections whose options each verb takes; `all` composes profile's and search's."""
VERB_OWN_KEYS: dict[str, frozenset[str]] = {
    "all": frozenset({"profiled_data_path", "pretrain_script_path_search"})
}
"""Keys a verb fills in itself (`all` searches the profile it just wrote, with the profiled script)."""


def verb_options(verb: str) -> tuple[Setting, ...]:
    """The command-line options of `verb`: its sections' settings, a key once (the first section's row)."""
    seen: dict[str, Setting] = {}
    for section in VERB_SECTIONS[verb]:
        for item in SETTINGS[section]:
            if item.key not in seen and item.key not in VERB_OWN_KEYS.get(verb, ()):
                seen[item.key] = item
    return tuple(seen.values())


def load_config_file(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """Read and check a sectioned JSON config (config.SECTIONS); returns {section: {key: value}} without nulls."""
    if path is None:
        return {}
    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            f"config file '{file}' does not exist; pass an existing JSON file to --config-path"
        )
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = (
            f" ({exc.msg} at line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        )
        raise ConfigError(
            f"config file '{file}' is not valid JSON{where}; fix the file or drop --config-path"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file '{file}' must hold a JSON object with sections {list(SECTIONS)}"
        )
    unknown_sections = sorted(set(data) - set(SECTIONS))
    if unknown_sections:
        raise ConfigError(
            f"config file '{file}': unknown section(s) {unknown_sections}; expected {list(SECTIONS)}"
        )
    out: dict[str, dict[str, Any]] = {}
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ConfigError(f"config file '{file}': section '{section}' must be a JSON object")
        known = {s.key for s in SETTINGS[section]}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                f"config file '{file}': unknown key '{section}.{unknown[0]}'; known keys: {sorted(known)}"
            )
        out[section] = {
            k: setting(section, k).convert(v, f"config file '{file}'")
            for k, v in values.items()
            if v is not None
        }
    return out


def resolve(section: str, command_line: dict[str, Any], config: dict[str, dict[str, Any]]) -> Any:
    """The settings object of one section: defaults, then the config file, then the command-line
    values that were given (None = not given). Keys of other sections are ignored, so a verb
    that composes sections (`all`) passes all its options to each."""
    values = dict(config.get(section, {}))
    known = {s.key for s in SETTINGS[section]}
    for key, value in command_line.items():
        if value is not None and key in known:
            values[key] = setting(section, key).convert(value, "command line")
    return SETTINGS_CLASSES[section](**values)


def require(settings: Any, *keys: str) -> None:
    """Raise a ConfigError naming the first required key of `settings` that is still unset."""
    for key in keys:
        if getattr(settings, key) is None:
            flag = key.replace("_", "-")
            raise ConfigError(
                f"missing required value '{key}': pass --{flag} or set \"{key}\" in the "
                f'"{settings.section}" section of the config file'
            )
