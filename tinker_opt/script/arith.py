"""Bash arithmetic `$((expr))` without running bash: integers, + - * / % ** and parentheses.

Bash computes in signed 64-bit integers that wrap around, `/` and `%` truncate toward zero (C),
and a negative exponent is an error. The expression is parsed with Python's `ast` (the syntax of
these operators is the same) and evaluated node by node; anything else (shifts, comparisons,
`i++`) is unreadable and gives None, which the walker reports as a warning.
"""

from __future__ import annotations

import ast
import operator
import re

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_WORD = 2**64


def _wrap(value: int) -> int:
    """Bash arithmetic is signed 64-bit with wrap-around (`$((2**63))` is -9223372036854775808)."""
    value %= _WORD
    return value - _WORD if value >= _WORD // 2 else value


def _binop(op: ast.operator, left: int, right: int) -> int:
    if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
        raise ZeroDivisionError
    if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):  # C semantics: truncate toward zero
        quotient = abs(left) // abs(right) * (1 if (left < 0) == (right < 0) else -1)
        return _wrap(left - right * quotient if isinstance(op, ast.Mod) else quotient)
    if isinstance(op, ast.Pow):
        if right < 0:
            raise ValueError("negative exponent")  # bash: "exponent less than 0"
        return _wrap(pow(left, right, _WORD))  # modular: 9**9**9 stays cheap
    if type(op) in _BINOPS:
        return _wrap(_BINOPS[type(op)](left, right))
    raise ValueError("unsupported arithmetic")


def _eval_node(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return _wrap(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval_node(node.operand)
        return _wrap(-value) if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        return _binop(node.op, _eval_node(node.left), _eval_node(node.right))
    raise ValueError("unsupported arithmetic")


def eval_arith(expr: str, lookup) -> int | None:
    """Value of a bash `$((expr))` with integer + - * / % **; names read through `lookup`."""

    def value_of(match: re.Match) -> str:
        raw = lookup(match.group(1) or match.group(2) or match.group(3)).strip()
        return raw if re.fullmatch(r"-?\d+", raw) else "0"

    expr = re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)|\b([A-Za-z_]\w*)\b", value_of, expr)
    try:
        return _eval_node(ast.parse(expr.strip() or "0", mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, MemoryError):
        return None  # RecursionError: a chain of thousands of terms nests too deep for ast
