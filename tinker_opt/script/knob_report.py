"""`inspect`'s knob section, from the knob registry alone (knobs.py): for every record, the value
the reader took from the script (`info`: a script/reader.ScriptInfo, read by attribute), the
flags of the record the script has, whether the search chooses it for this script, and where the
cost model prices it. A knob added to the registry appears here with no change to `inspect`
(ARCHITECTURE.md, "The knob registry")."""

from __future__ import annotations

import enum
from typing import Any

from tinker_opt.knob_types import ChoiceKnob, Knob, KnobContext, LayoutKnob, ModelFacts
from tinker_opt.knobs import CHOICE_KNOBS, LAYOUT_KNOBS, OVERLAP_KNOBS
from tinker_opt.script.versions import VersionRange, flag_allowed

SWITCH_PRICING = "costs/overlap.py"
"""Where every priced switch is priced: its rule in costs/overlap.py, which the layer and stage
terms apply (costs/layer_comm.py, costs/terms.py)."""
NOT_PRICED = "not priced: kept as the script has it"


def searched_switch(knob: Knob, has: Any, vr: VersionRange) -> bool:
    """Whether the search may switch `knob` for a script (`has(flag)`: the script has the flag)
    at version `vr` (expressible.searched_overlaps; it chooses it where it is also priced): one
    the search may add whose flag the script has or the version knows, or one it may not add (TP
    overlap) that the script already sets."""
    present = any(has(flag) for flag in knob.flags)
    if knob.added_by_search:
        return present or any(flag_allowed(flag, vr) for flag in knob.flags)
    return present


def _plain(value: Any) -> Any:
    """A JSON value: enums by their value, tuples as lists."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _value(record: Knob | LayoutKnob | ChoiceKnob, info: Any) -> Any:
    """The value the reader took: from the strategy, the model or the job (ChoiceKnob.home)."""
    home = record.home if isinstance(record, ChoiceKnob) else "strategy"
    source = {"strategy": info.train.strategy, "model": info.model, "job": info.train}[home]
    return _plain(getattr(source, record.key, None))


def _row(record: Knob | LayoutKnob | ChoiceKnob, info: Any) -> dict[str, Any]:
    if isinstance(record, Knob):
        # The search's own test at the script's model and layout, where `value` is read: a knob
        # that does not exist there (None) is not set by the search there either.
        context = KnobContext.of_facts(
            info.train.strategy, ModelFacts.of(info.model, info.version_range.family)
        )
        searched = record.set_by_search(context) and searched_switch(
            record, info.launch.has, info.version_range
        )
        priced = SWITCH_PRICING if record.priced else NOT_PRICED
    elif isinstance(record, LayoutKnob):
        searched, priced = True, record.priced
    else:
        searched, priced = record.searched, record.priced
    return {
        "value": _value(record, info),
        "flags": [s.flag for s in record.spellings if info.launch.has(s.flag)],
        "searched": searched,
        "priced": priced,
    }


def knob_section(info: Any) -> dict[str, dict[str, Any]]:
    """Every registry record in its order (switches, layout, choices): key -> its row."""
    records: list[Knob | LayoutKnob | ChoiceKnob] = [*OVERLAP_KNOBS, *LAYOUT_KNOBS, *CHOICE_KNOBS]
    return {record.key: _row(record, info) for record in records}


def knob_cell(value: Any) -> str:
    """One cell of `inspect`'s text tables: a knob row as `value | flags | searched | priced`,
    any other value as text."""
    if not isinstance(value, dict) or set(value) != {"value", "flags", "searched", "priced"}:
        return "" if value is None else str(value)
    flags = ", ".join(value["flags"]) or "(no flag: the default)"
    searched = "searched" if value["searched"] else "not searched"
    return f"{value['value']} | {flags} | {searched} | {value['priced']}"
