"""Settings precedence and config-file checks (tinker_opt/config.py)."""

import json
from pathlib import Path

import pytest

from tinker_opt import config
from tinker_opt.errors import ConfigError

TINKER_CONFIG = Path(__file__).parent / "fixtures" / "tinker_parameter_config.json"


def _write(tmp_path: Path, data) -> Path:
    path = tmp_path / "cfg.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_tinker_example_config_loads_unchanged():
    """Tinker's own example config (nulls and all) loads; nulls count as unset."""
    loaded = config.load_config_file(TINKER_CONFIG)
    assert loaded["profile"] == {"version": "1.1", "max_npu": 8}
    assert loaded["search"]["cpus"] == 5 and "global_batch_size" not in loaded["search"]
    assert loaded["simulate"]["recompute"] == "none" and loaded["simulate"]["zero"] == 0


def test_precedence_command_line_over_file_over_defaults(tmp_path):
    """Command line > config file > built-in default, key by key."""
    path = _write(tmp_path, {"search": {"cpus": 5, "memory_limit": 30000}})
    values = config.resolve(
        "search", {"cpus": 3, "memory_limit": None}, config.load_config_file(path)
    )
    assert values.cpus == 3
    assert values.memory_limit == 30000
    assert values.top_k == 10


def test_unknown_key_is_named(tmp_path):
    """An unknown key gives one line naming section and key."""
    path = _write(tmp_path, {"search": {"memory_limt": 1}})
    with pytest.raises(ConfigError, match=r"unknown key 'search\.memory_limt'"):
        config.load_config_file(path)


def test_not_json_is_an_error(tmp_path):
    """A file that is not JSON names the file and the position."""
    with pytest.raises(ConfigError, match="not valid JSON"):
        config.load_config_file(_write(tmp_path, "{profile: oops"))


def test_wrong_type_is_named(tmp_path):
    """A string where an integer belongs names the key and the value."""
    with pytest.raises(ConfigError, match="'cpus' must be an integer"):
        config.load_config_file(_write(tmp_path, {"search": {"cpus": [1]}}))


@pytest.mark.parametrize("value", [0, -4])
def test_non_positive_sizes_are_rejected(value):
    """Zero or negative sizes are one-line errors."""
    with pytest.raises(ConfigError, match="must be positive"):
        config.resolve("search", {"global_batch_size": value}, {})


def test_missing_required_value_names_flag_and_key():
    """require() names the flag and the config key to set."""
    values = config.resolve("search", {}, {})
    with pytest.raises(ConfigError, match=r"--profiled-data-path.*\"search\""):
        config.require(values, "profiled_data_path")


def test_tinker_switches_are_not_inverted():
    """'False' means False (Tinker's --is_full_tune False meant True)."""
    assert config.resolve("profile", {"is_full_tune": "False"}, {}).is_full_tune is False
    assert config.resolve("simulate", {"simu_sp": "1"}, {}).simu_sp is True


def test_num_layer_list_and_recompute_forms():
    """Comma lists and Tinker's 0/1 recompute are understood."""
    values = config.resolve("simulate", {"num_layer_list": "4,3,5", "recompute": 1}, {})
    assert values.num_layer_list == (4, 3, 5)
    assert values.recompute == "full"


def test_settings_are_typed_objects_with_one_default():
    """resolve() returns the section's frozen dataclass: a misspelt name fails, defaults come from the table."""
    values = config.resolve("profile", {}, {})
    assert isinstance(values, config.ProfileSettings)
    assert (
        values.max_mbs == config.setting("profile", "max_mbs").default == 8 and values.warmup == 2
    )
    with pytest.raises(AttributeError):
        values.max_mbz  # noqa: B018
    with pytest.raises(Exception):
        values.max_mbs = 2


def test_all_takes_the_profile_and_search_options():
    """`all` composes profile and search: every option of either (but the profile it writes itself)."""
    keys = {s.key for s in config.verb_options("all")}
    assert keys == (
        {s.key for s in config.SETTINGS["profile"]} | {s.key for s in config.SETTINGS["search"]}
    ) - {"profiled_data_path", "pretrain_script_path_search"}
    assert "prof_path" in keys


def test_a_section_takes_only_its_own_keys_from_the_command_line():
    """A key of another section passed to resolve() is ignored (all passes its options to both)."""
    assert not hasattr(config.resolve("search", {"warmup": 3}, {}), "warmup")
