"""Named columns of equal length: the profile's tables as the search reads them, without pandas.

Importing pandas costs a `search` process about 0.2 s, more than reading, presolving or writing
(issue 30), and the search needs only a few column look-ups: the profile's rows grouped by shape
(costs/profile_table.py), the measured collectives grouped by curve (costs/comm_model.py) and
the results table (emit/results.py). `Columns` holds them as numpy arrays; `read_csv` reads a
CSV file into it with pandas' type rules (a column of integers is int64, of numbers float64 with
an empty cell as NaN, else text with an empty cell as NaN; `True` / `False` alone is bool), so
that every value is the one `pandas.read_csv` gives. The verbs that want frames (profile,
calibrate, report) convert with `frame()` / `Columns.of`, which import pandas then.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

NA_TEXT = frozenset(
    {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN"}
    | {"<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}
)
"""The cells `pandas.read_csv` reads as missing by default (its `na_values` list)."""


TRUE_TEXT = frozenset({"True", "TRUE", "true"})
FALSE_TEXT = frozenset({"False", "FALSE", "false"})
"""The cells pandas reads as booleans (a column of them alone is bool; with missing cells, text)."""


class CsvError(ValueError):
    """A file that is not a table of named columns (the readers turn it into their own error)."""


class Columns:
    """Equal-length numpy arrays by column name, in the order given."""

    def __init__(self, data: Mapping[str, np.ndarray]) -> None:
        self._data = dict(data)
        lengths = {len(values) for values in self._data.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths {sorted(lengths)}")
        self._length = lengths.pop() if lengths else 0

    @classmethod
    def of(cls, table: Columns | pd.DataFrame | None) -> Columns:
        """`table` as Columns (a DataFrame's columns as its arrays; None: no columns)."""
        if table is None:
            return cls({})
        if isinstance(table, Columns):
            return table
        return cls({str(name): table[name].to_numpy() for name in table.columns})

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[Any]], names: Sequence[str]) -> Columns:
        """Columns from rows of values in `names` order, each column typed as pandas types a
        column of Python values (`typed`)."""
        return cls({name: typed([row[i] for row in rows]) for i, name in enumerate(names)})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._data)

    @property
    def empty(self) -> bool:
        return self._length == 0 or not self._data

    def __len__(self) -> int:
        return self._length

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def __getitem__(self, name: str) -> np.ndarray:
        return self._data[name]

    def with_column(self, name: str, values: Any) -> Columns:
        """A copy with column `name` set (a scalar fills every row, as pandas does)."""
        if np.ndim(values) == 0:
            values = typed([values] * self._length)
        return Columns({**self._data, name: np.asarray(values)})

    def select(self, names: Iterable[str]) -> Columns:
        """The columns `names`, in that order."""
        return Columns({name: self._data[name] for name in names})

    def take(self, rows: np.ndarray) -> Columns:
        """The rows a boolean mask or an index array picks, in that order."""
        return Columns({name: values[rows] for name, values in self._data.items()})

    def groups(self, keys: Sequence[str]) -> dict[tuple, np.ndarray]:
        """{key values: the row indices holding them, in row order}, keys in sorted order (as
        pandas' `groupby(keys).indices`)."""
        found: dict[tuple, list[int]] = {}
        for index, key in enumerate(zip(*(self._data[k].tolist() for k in keys), strict=True)):
            found.setdefault(key, []).append(index)
        return {key: np.array(found[key], dtype=np.intp) for key in sorted(found)}

    def frame(self) -> pd.DataFrame:
        """The columns as a pandas DataFrame (imports pandas)."""
        import pandas as pd

        return pd.DataFrame(dict(self._data), columns=list(self._data))


def typed(values: list[Any]) -> np.ndarray:
    """A column of Python values as pandas types it: int64 when every value is an integer,
    float64 when every value is a number or missing (None / NaN), bool when every value is a
    bool, else object (missing as NaN)."""
    present = [v for v in values if not is_missing(v)]
    if present and len(present) == len(values) and all(isinstance(v, bool) for v in values):
        return np.array(values, dtype=bool)
    numbers = all(
        isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in present
    )
    if numbers and len(present) == len(values) and all(_integral_type(v) for v in values):
        return np.array(values, dtype=np.int64)
    if numbers:
        return np.array([math.nan if is_missing(v) else v for v in values], dtype=np.float64)
    return np.array([math.nan if is_missing(v) else v for v in values], dtype=object)


def is_missing(value: Any) -> bool:
    """None or NaN: a cell pandas leaves empty."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _integral_type(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def read_csv(path: Path, *, skip_blank_lines: bool = True) -> Columns:
    """A CSV file with a header row as Columns, each column typed as `pandas.read_csv` types it
    (module docstring). Raises CsvError for a file without a header, a row longer than the header
    or bytes that are not UTF-8."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.reader(handle))
    except UnicodeDecodeError as exc:
        raise CsvError(str(exc)) from None
    if skip_blank_lines:
        rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        raise CsvError("No columns to parse from file")
    header, body = rows[0], rows[1:]
    width = len(header)
    for line, row in enumerate(body, start=2):
        if len(row) > width:
            raise CsvError(
                f"Error tokenizing data. Expected {width} fields in line {line}, saw {len(row)}"
            )
    cells = [row + [""] * (width - len(row)) for row in body]
    return Columns({name: _parsed([row[i] for row in cells]) for i, name in enumerate(header)})


def _parsed(texts: list[str]) -> np.ndarray:
    """One CSV column's cells typed as pandas types them (module docstring)."""
    if not texts:  # a header without rows: pandas' empty columns are text
        return np.array([], dtype=object)
    missing = [text in NA_TEXT for text in texts]
    present = [text for text, gone in zip(texts, missing, strict=True) if not gone]
    if present and all(text in TRUE_TEXT or text in FALSE_TEXT for text in present):
        flags = [
            math.nan if gone else text in TRUE_TEXT
            for text, gone in zip(texts, missing, strict=True)
        ]
        return np.array(flags, dtype=object if any(missing) else bool)
    if not any(missing) and all(_is_int(text) for text in present):
        return np.array([int(text) for text in present], dtype=np.int64)
    numbers = [
        math.nan if gone else _number(text) for text, gone in zip(texts, missing, strict=True)
    ]
    if all(number is not None for number in numbers):
        return np.array(numbers, dtype=np.float64)
    return np.array(
        [math.nan if gone else text for text, gone in zip(texts, missing, strict=True)],
        dtype=object,
    )


def _is_int(text: str) -> bool:
    """A decimal integer in int64's range (pandas reads a larger one as a float)."""
    digits = text.strip()
    digits = digits[1:] if digits[:1] in "+-" else digits
    return digits.isdecimal() and digits.isascii() and -(2**63) <= int(text) < 2**63


def _number(text: str) -> float | None:
    """The float a cell spells, None when it is text (Python's own spellings with `_` are)."""
    if "_" in text:
        return None
    try:
        return float(text)
    except ValueError:
        return None
