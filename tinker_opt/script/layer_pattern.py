"""Megatron's `--moe-layer-freq` read safely: an integer, a list literal or a `([0]*k+[1]*n)` form.

Megatron-LM evaluates the list form as a Python expression (megatron/training/arguments.py
`moe_freq_type`: an int k means "every k-th layer is MoE", layer i MoE when i % k == 0; a string is
`eval`-ed to a list with one 0/1 per layer, 1 = MoE; TransformerConfig checks its length equals
num_layers). DeepSeek-V3's recipes write `([0]*3+[1]*58)`: 3 dense then 58 MoE layers. Here the
expression is parsed with `ast` and only integer and list literals, `+` of lists and `*` of a list
by an integer are evaluated; anything else is a ScriptError, never executed.
"""

from __future__ import annotations

import ast

from tinker_opt.errors import ScriptError

FLAG = "--moe-layer-freq"
_MAX_LAYERS = 100_000
"""A guard against `[1]*10**9`: no model has more layers."""


def _value(node: ast.AST) -> int | list[int]:
    """The integer or 0/1 list a node of the allowed grammar stands for."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value  # MindSpeed-LLM scripts write -1 (read as every layer)
    if isinstance(node, ast.List | ast.Tuple):
        items = [_value(item) for item in node.elts]
        if not all(isinstance(item, int) and item in (0, 1) for item in items):
            raise ValueError("list items must be 0 or 1")
        return items  # type: ignore[return-value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
            return left + right
        if isinstance(node.op, ast.Mult) and isinstance(left, list) != isinstance(right, list):
            pattern, times = (left, right) if isinstance(left, list) else (right, left)
            assert isinstance(pattern, list) and isinstance(times, int)
            if times < 0 or len(pattern) * times > _MAX_LAYERS:
                raise ValueError("repeat count out of range")
            return pattern * times
    raise ValueError(f"unsupported expression {ast.dump(node)[:40]}")


def parse_layer_freq(text: str) -> int | tuple[int, ...]:
    """An int k (every k-th layer MoE; k < 1 is read as 1, as before) or the per-layer 0/1 pattern."""
    stripped = text.strip().strip("'\"")
    try:
        value = _value(ast.parse(stripped, mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        raise ScriptError(
            f"{FLAG} has value {text!r}; give an integer, a 0/1 list like [0,1,1] or a "
            "form like ([0]*3+[1]*58)"
        ) from None
    return value if isinstance(value, int) else tuple(value)


def pattern_for_layers(
    value: int | tuple[int, ...], layers_in_script: int, noop_layers: tuple[int, ...]
) -> tuple[int, ...] | None:
    """The 0/1 pattern over the computing layers (noop layers dropped), None for an int frequency.

    The list counts every layer of `--num-layers` (Megatron checks len == num_layers)."""
    if isinstance(value, int):
        return None
    if len(value) != layers_in_script:
        raise ScriptError(
            f"{FLAG} lists {len(value)} layers but --num-layers is {layers_in_script}; "
            "give one 0/1 entry per layer"
        )
    noop = set(noop_layers)
    return tuple(flag for index, flag in enumerate(value) if index not in noop)
