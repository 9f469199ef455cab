"""tinker_opt.columns reads a CSV as pandas does, and results.csv is written as pandas wrote it:
the search reads the profile and writes its results without importing pandas (issue 30)."""

from __future__ import annotations

import math
import subprocess
import sys
from io import StringIO

import pandas as pd
import pytest

from tinker_opt.choices import Recompute
from tinker_opt.columns import Columns, CsvError, read_csv
from tinker_opt.emit.results import results_csv

CSV = (
    "block,tp,fwd_us,etp,status,flag,half,note,big\n"
    "layer,2,1.5,,ok,True,True,a b,-12\n"
    "\n"
    "head,4,0.1,2,,False,,NA,3\n"
    "layer,8,3,4,oom,true,False,c,4\n"
)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a.hex() == b.hex()
    return a == b


def test_read_csv_types_and_values_as_pandas(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(CSV, encoding="utf-8")
    mine, theirs = read_csv(path), pd.read_csv(path)
    assert mine.names == tuple(theirs.columns)
    for name in theirs.columns:
        expected = theirs[name].to_numpy()
        assert mine[name].dtype.kind == expected.dtype.kind, name
        assert all(
            _same(a, b) for a, b in zip(mine[name].tolist(), expected.tolist(), strict=True)
        ), name


def test_read_csv_refuses_what_pandas_refuses(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(CsvError):
        read_csv(empty)
    long = tmp_path / "long.csv"
    long.write_text("a,b\n1,2\n1,2,3\n", encoding="utf-8")
    with pytest.raises(CsvError, match="line 3"):
        read_csv(long)


def test_groups_sorted_with_row_indices_as_groupby():
    table = Columns.of(pd.DataFrame({"k": ["b", "a", "b", "a"], "v": [1, 2, 3, 4]}))
    groups = table.groups(["k"])
    assert list(groups) == [("a",), ("b",)]
    assert [list(v) for v in groups.values()] == [[1, 3], [0, 2]]
    assert table.take(table["v"] > 2)["k"].tolist() == ["b", "a"]


def _pandas_csv(rows) -> str:
    frame = pd.DataFrame(rows)
    for column in ("recompute_num_layers", "etp"):
        frame[column] = frame[column].astype("Int64")
    buffer = StringIO()
    frame.to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue()


@pytest.mark.parametrize(
    "column",
    [
        [1, 2],  # integers
        [1, None],  # integers with an empty cell: floats, as pandas wrote them
        [1.25, 2],  # a float among integers
        [True, None],  # switches where a knob does not exist
        [Recompute.FULL, "x,y"],  # choices and text with a comma
        [0.1 + 0.2, 1e16],
    ],
)
def test_results_csv_is_what_pandas_wrote(column):
    rows = [
        {"rank": i + 1, "value": v, "etp": [None, 4][i], "recompute_num_layers": [2, None][i]}
        for i, v in enumerate(column)
    ]
    assert results_csv(rows) == _pandas_csv(rows)


def test_search_path_does_not_import_pandas():
    """Reading a profile folder, the cost model and the results writer: no pandas."""
    code = (
        "import sys; import tinker_opt.profile.store, tinker_opt.costs.evaluate, "
        "tinker_opt.emit.search_folder, tinker_opt.verbs.search; print('pandas' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
