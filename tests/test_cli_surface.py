"""The command-line surface, frozen: every verb, its arguments and options, their spellings and
defaults, compared with the checked-in table tests/fixtures/cli_surface.tsv.

A failure here means the surface changed. If the change is deliberate (a new setting in
config.TABLE, a renamed flag), regenerate the table and commit it with the change:

    .venv/bin/python tests/test_cli_surface.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from tinker_opt import config
from tinker_opt.cli import app

EXPECTED = Path(__file__).parent / "fixtures" / "cli_surface.tsv"
HEADER = "verb\tparameter\tkind\tspellings\tdefault"


def surface_rows() -> list[str]:
    """One row per parameter of every verb: verb, name, argument/option/switch, spellings, default.

    The default is the effective one: the config table's for settings (the command line itself
    passes "not given" so that a config file can apply), the command's own otherwise."""
    group = typer.main.get_command(app)
    rows = [HEADER]
    for verb, command in group.commands.items():
        settings = (
            {s.key: s for s in config.verb_options(verb)} if verb in config.VERB_SECTIONS else {}
        )
        for param in command.params:
            if param.name == "help":
                continue
            kind = (
                "argument"
                if param.param_type_name == "argument"
                else ("switch" if param.is_flag else "option")
            )
            spellings = ",".join(param.opts + param.secondary_opts)
            default = settings[param.name].default if param.name in settings else param.default
            default = "required" if param.required else repr(default)
            rows.append(f"{verb}\t{param.name}\t{kind}\t{spellings}\t{default}")
    return rows


def test_cli_surface_is_the_checked_in_table():
    """Verbs, options, spellings and defaults equal tests/fixtures/cli_surface.tsv (regenerate deliberately)."""
    expected = EXPECTED.read_text(encoding="utf-8").splitlines()
    actual = surface_rows()
    missing, extra = sorted(set(expected) - set(actual)), sorted(set(actual) - set(expected))
    assert not missing and not extra, (
        f"surface changed: gone {missing}, new {extra}; see this file's docstring"
    )
    assert actual == expected, "same rows, different order"


def test_every_setting_has_both_spellings_on_its_verbs():
    """Each table setting is an option of each of its verbs, as --kebab-case and Tinker's --snake_case."""
    rows = [row.split("\t") for row in surface_rows()[1:]]
    by_verb = {(verb, name): spellings.split(",") for verb, name, _, spellings, _ in rows}
    for verb in config.VERB_SECTIONS:
        for item in config.verb_options(verb):
            spellings = by_verb[(verb, item.key)]
            assert "--" + item.key.replace("_", "-") in spellings and "--" + item.key in spellings


def test_the_nine_verbs():
    """The verbs a user can call."""
    assert list(typer.main.get_command(app).commands) == [
        "profile",
        "search",
        "all",
        "simulate",
        "inspect",
        "apply",
        "calibrate",
        "check",
        "profile-comm",
    ]


if __name__ == "__main__":
    EXPECTED.write_text("\n".join(surface_rows()) + "\n", encoding="utf-8")
    sys.stdout.write(f"wrote {EXPECTED}\n")
