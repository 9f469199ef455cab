"""The command line's options: each verb's settings from config.TABLE as typer options
(`with_settings`: kebab-case plus Tinker's snake_case spellings, "not given" as None so that
config.resolve applies command line > config file > default), the options every verb shares,
and the positional script. cli.py declares the commands with them."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer

from tinker_opt import config
from tinker_opt.errors import ConfigError


def _option(item: config.Setting) -> inspect.Parameter:
    """A setting as a typer option: --kebab-case, Tinker's --snake_case and aliases; "not given" is
    None (a switch: False), so that config.resolve can apply command line > config file > default."""
    if item.switch:
        option = typer.Option(False, *item.flags, help=item.help_text)
        return inspect.Parameter(
            item.key, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=bool
        )
    kind = {"int": int, "float": float}.get(item.kind, str)
    option = typer.Option(None, *item.flags, help=item.help_text, show_default=False)
    return inspect.Parameter(
        item.key,
        inspect.Parameter.KEYWORD_ONLY,
        default=option,
        annotation=Optional[kind],  # noqa: UP045 (built at run time from a type)
    )


def with_settings(verb: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the options of `verb` from config.TABLE; the command receives them as
    `given` ({key: value or None}) next to its own parameters. Adding a setting to the table adds
    the option here, to the config file and to the settings class at once."""
    items = config.verb_options(verb)

    def wrap(command: Callable[..., None]) -> Callable[..., None]:
        hints = typing.get_type_hints(command)
        own = [
            p.replace(annotation=hints[p.name])
            for p in inspect.signature(command).parameters.values()
            if p.name != "given"
        ]
        options = [_option(item) for item in items]

        @functools.wraps(command)
        def run(**kwargs: Any) -> None:
            given = {item.key: kwargs.pop(item.key) for item in items}
            given.update(
                {item.key: True if given[item.key] else None for item in items if item.switch}
            )
            command(given=given, **kwargs)

        # own positionals first, then the table's options, then the command's own options
        positional = [p for p in own if isinstance(p.default, typer.models.ArgumentInfo)]
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p not in positional]
        params = (
            [p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in positional]
            + options
            + rest
        )
        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        del run.__wrapped__  # typer must see the new signature, not the command's
        return run

    return wrap


CONFIG_OPT = typer.Option(
    None,
    "--config-path",
    "--config_path",
    "--config",
    help="JSON config with Tinker's profile / search / simulate sections.",
)
QUIET_OPT = typer.Option(False, "--quiet", "-q", help="Print only the result paths (for scripts).")
SCRIPT_ARG = typer.Argument(None, help="The training launch script (.sh).", show_default=False)


MODEL_CONFIG_HELP = (
    "FSDP2 launches: the model's Hugging Face config.json, when model.model_name_or_path "
    "is not on this machine."
)


def script_setting(given: dict[str, Any], key: str, positional: Path | None) -> dict[str, Any]:
    """`given` with the positional script under `key` (the verb's script setting)."""
    flag = given.get(key)
    if positional is not None and flag is not None and str(positional) != flag:
        raise ConfigError(
            f"two scripts given ('{positional}' and --{key.replace('_', '-')} '{flag}'); pass one"
        )
    return {**given, key: str(positional) if positional is not None else flag}
