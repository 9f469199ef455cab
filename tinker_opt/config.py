"""Settings: built-in defaults < JSON config file < command line, resolved in this one place.

The config file has Tinker's three sections (`profile`, `search`, `simulate`); Tinker's own
example config (every key present, many `null`) loads unchanged: `null` means "not set". An
unknown key, a wrong type or a missing required value is a one-line `ConfigError` naming the key.
Each `Setting` carries its default, unit and help text, which the CLI shows in `--help`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tinker_opt.errors import ConfigError

SECTIONS = ("profile", "search", "simulate")


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
    """Tinker's 0/1 (off / full) or none | selective | full."""
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return "full" if value else "none"
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("0", "1"):
            return "full" if word == "1" else "none"
        if word in ("none", "selective", "full"):
            return word
    raise TypeError("none | selective | full (or 0/1)")


CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "int": _to_int, "float": _to_float, "str": _to_str, "bool": _to_bool,
    "int_list": _to_int_list, "recompute": _to_recompute,
}


@dataclass(frozen=True)
class Setting:
    """One configurable value: its key (Tinker's snake_case spelling), kind, default and help."""

    key: str
    kind: str
    default: Any
    help: str
    positive: bool = False

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
    def help_text(self) -> str:
        return self.help if self.default is None else f"{self.help} [default: {self.default}]"


def _s(key: str, kind: str, default: Any, help_text: str, positive: bool = False) -> Setting:
    return Setting(key, kind, default, help_text, positive)


PROFILE = (
    _s("model_name", "str", None, "Model label for output names (default: from the script's file name)."),
    _s("model_size", "str", None, "Model size label, e.g. 7b (default: from the script's file name)."),
    _s("pretrain_script_path", "str", None, "The training launch script (.sh) to profile."),
    _s("version", "str", None, "Framework version (1.0, 1.1, 1.2, 1.0.0, 2.0.0, 2.3.0, ...); detected from the script if unset."),
    _s("max_npu", "int", 8, "Largest tensor-parallel size to profile (bounds tp only; devices per node of the target).", True),
    _s("max_ep", "int", None, "Largest expert-parallel size to profile (default: every divisor of the expert count).", True),
    _s("max_mbs", "int", 8, "Largest micro-batch size to profile.", True),
    _s("prof_tp", "int_list", None, "Comma list restricting the profiled tp values, e.g. 1,2,4.", True),
    _s("prof_sp", "int_list", None, "Comma list restricting sequence parallel, e.g. 0,1."),
    _s("save_path", "str", "./profiled_data", "Folder that receives profiled-data-<model>-<size>-<time>/."),
    _s("prof_path", "str", None, "Profile folder to write or resume (default: a new one under save_path)."),
    _s("task_id", "str", None, "Suffix appended to the profile folder name."),
    _s("is_full_tune", "bool", None, "Treat the script as a full-parameter fine-tune (detected from the script if unset)."),
    _s("device", "str", "auto", "Profiling device: auto | npu | cuda | cpu | analytic."),
    _s("hardware", "str", None, "Hardware description (name or JSON file): comm figures, and the analytic device."),
    _s("repeats", "int", 5, "Timed repeats per block (median reported).", True),
    _s("warmup", "int", 2, "Untimed warm-up runs per block."),
    _s("devices", "int", None, "Local devices to profile on at once, one worker process each (default: every device; 1 on the CPU).", True),
    _s("blocks", "str", "reference", "Decoder-layer source: reference | megatron-core (needs the megatron extra)."),
)

SEARCH = (
    _s("profiled_data_path", "str", None, "Profiled-data folder (a bare name is looked up under ./profiled_data)."),
    _s("global_batch_size", "int", None, "Global batch size in samples (default: the script's).", True),
    _s("num_nodes", "int", None, "Nodes of the target cluster (default: the script's).", True),
    _s("num_npus_per_node", "int", 8, "Devices per node of the target cluster.", True),
    _s("cpus", "int", 2, "Solver workers / enumeration processes.", True),
    _s("memory_limit", "float", 57000, "Modelled memory budget in MB per device (weights, grads, optimizer, activations, transients).", True),
    _s("output_dir", "str", "./results", "Folder that receives the results folder."),
    _s("pretrain_script_path_search", "str", None, "Script to rewrite into tuned configs (default: the profiled one)."),
    _s("solver", "str", "cpsat", "cpsat | milp | enum."),
    _s("time_limit", "float", 60, "Solver time limit in seconds.", True),
    _s("top_k", "int", 10, "Number of ranked strategies (and tuned scripts) to write.", True),
    _s("max_mbs", "int", None, "Largest micro-batch size the search may choose.", True),
    _s("hardware", "str", None, "Hardware description (name or JSON) for communication figures."),
    _s("inter_node_bandwidth", "float", None, "Inter-node bandwidth in GB/s per device (overrides the profile).", True),
    _s("version", "str", None, "Framework version of the tuned scripts (detected from the script if unset)."),
)

SIMULATE = (
    _s("profiled_data_path", "str", None, "Profiled-data folder (a bare name is looked up under ./profiled_data)."),
    _s("num_layers", "int", None, "Number of layers (default: the profiled model's).", True),
    _s("global_batch_size", "int", None, "Global batch size in samples.", True),
    _s("num_nodes", "int", None, "Nodes of the cluster.", True),
    _s("num_npus_per_node", "int", 8, "Devices per node.", True),
    _s("memory_limit", "float", 57000, "Memory budget in MB per device (for the fits column).", True),
    _s("simu_tp", "int", 1, "Tensor-parallel size.", True),
    _s("simu_pp", "int", 1, "Pipeline-parallel size.", True),
    _s("simu_ep", "int", 1, "Expert-parallel size.", True),
    _s("simu_etp", "int", None, "Expert tensor-parallel size (default: tp).", True),
    _s("simu_sp", "bool", False, "Sequence parallel (0/1)."),
    _s("simu_cp", "int", 1, "Context-parallel size.", True),
    _s("cp_algo", "str", None, "Context-parallel algorithm (default megatron_cp_algo when cp > 1)."),
    _s("simu_vpp", "int", 1, "Virtual pipeline chunks per pipeline rank.", True),
    _s("zero", "bool", False, "Distributed optimizer (0/1); same as dist_opt."),
    _s("dist_opt", "bool", None, "Distributed optimizer (0/1)."),
    _s("micro_batch_size", "int", 1, "Micro-batch size.", True),
    _s("num_layer_list", "int_list", None, "Layers per pipeline stage, e.g. 4,4,4,4.", True),
    _s("recompute", "recompute", "none", "none | selective | full (Tinker's 0/1 = none/full)."),
    _s("recompute_num_layers", "int", None, "Layers per stage fully recomputed (default: all).", True),
    _s("hardware", "str", None, "Hardware description (name or JSON) for communication figures."),
    _s("inter_node_bandwidth", "float", None, "Inter-node bandwidth in GB/s per device.", True),
)

SETTINGS: dict[str, tuple[Setting, ...]] = {"profile": PROFILE, "search": SEARCH, "simulate": SIMULATE}


def setting(section: str, key: str) -> Setting:
    """The Setting of `section` named `key` (used by the CLI for help texts)."""
    for item in SETTINGS[section]:
        if item.key == key:
            return item
    raise KeyError(f"{section}.{key}")


def load_config_file(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """Read and check a three-section JSON config; returns {section: {key: value}} without nulls."""
    if path is None:
        return {}
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file '{file}' does not exist; pass an existing JSON file to --config-path")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" ({exc.msg} at line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ConfigError(f"config file '{file}' is not valid JSON{where}; fix the file or drop --config-path") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{file}' must hold a JSON object with sections {list(SECTIONS)}")
    unknown_sections = sorted(set(data) - set(SECTIONS))
    if unknown_sections:
        raise ConfigError(f"config file '{file}': unknown section(s) {unknown_sections}; expected {list(SECTIONS)}")
    out: dict[str, dict[str, Any]] = {}
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ConfigError(f"config file '{file}': section '{section}' must be a JSON object")
        known = {s.key for s in SETTINGS[section]}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"config file '{file}': unknown key '{section}.{unknown[0]}'; known keys: {sorted(known)}")
        out[section] = {k: setting(section, k).convert(v, f"config file '{file}'")
                        for k, v in values.items() if v is not None}
    return out


def resolve(section: str, command_line: dict[str, Any], config: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Values of one section: defaults, then the config file, then command-line values that were given."""
    values = {s.key: s.default for s in SETTINGS[section]}
    values.update(config.get(section, {}))
    for key, value in command_line.items():
        if value is not None:
            values[key] = setting(section, key).convert(value, "command line")
    return values


def require(values: dict[str, Any], section: str, *keys: str) -> None:
    """Raise a ConfigError naming the first required key that is still unset."""
    for key in keys:
        if values.get(key) is None:
            flag = key.replace("_", "-")
            raise ConfigError(f"missing required value '{key}': pass --{flag} or set \"{key}\" in the \"{section}\" section of the config file")
