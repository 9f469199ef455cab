"""`inspect`'s knob section comes from the registry alone (script/knob_report.py): every record,
its value as read, the flags it came from, whether it is searched and where it is priced."""

from __future__ import annotations

import json

from cli_support import invoke_cli
from script_support import FIXTURES

from tinker_opt import knobs
from tinker_opt.knob_types import Knob, spell
from tinker_opt.script import knob_report
from tinker_opt.script.reader import inspect_dict, read_script, read_script_text

_QWEN3 = FIXTURES / "pretrain_qwen3_30b_a3b_4k_A3_ptd.sh"


def test_every_registry_record_has_a_row_in_registry_order():
    info = read_script(_QWEN3)
    section = inspect_dict(info)["knobs"]
    records = [*knobs.OVERLAP_KNOBS, *knobs.LAYOUT_KNOBS, *knobs.CHOICE_KNOBS]
    assert list(section) == [record.key for record in records]
    assert all(set(row) == {"value", "flags", "searched", "priced"} for row in section.values())


def test_rows_say_value_flags_searched_and_pricing():
    """MindSpeed-LLM's Qwen3-30B A3 script: the values the reader took, the flags they came from."""
    section = inspect_dict(read_script(_QWEN3))["knobs"]
    assert section["tp"] == {
        "value": 4,
        "flags": ["--tensor-model-parallel-size"],
        "searched": True,
        "priced": knobs.LAYOUT["tp"].priced,
    }
    moe = section["overlap_moe_comm"]
    assert moe["value"] is True and moe["flags"] == ["--moe-alltoall-overlap-comm"]
    assert moe["searched"] is True and moe["priced"] == knob_report.SWITCH_PRICING
    # TP overlap: the search never adds it to a script without it (Knob.added_by_search).
    assert section["tp_comm_overlap"]["searched"] is False
    # Not priced: kept as the script has it, never searched.
    assert section["delay_wgrad_compute"]["priced"] == knob_report.NOT_PRICED
    assert section["delay_wgrad_compute"]["searched"] is False
    dispatcher = section["moe_token_dispatcher_type"]
    assert dispatcher["value"] == "alltoall" and dispatcher["searched"] is False
    assert section["recompute"]["priced"] == knobs.CHOICES["recompute"].priced


def test_a_new_record_appears_without_touching_inspect(monkeypatch):
    """A knob declared in the registry is in `inspect`'s section with no other change."""
    new = Knob(key="made_up_overlap", spellings=(spell("--made-up-overlap", None, (0, 1)),))
    monkeypatch.setattr(knob_report, "OVERLAP_KNOBS", (*knobs.OVERLAP_KNOBS, new))
    text = _QWEN3.read_text().replace("--moe-alltoall-overlap-comm", "--made-up-overlap")
    rows = knob_report.knob_section(read_script_text(text))
    assert list(rows)[len(knobs.OVERLAP_KNOBS)] == "made_up_overlap"
    row = rows["made_up_overlap"]
    assert row["flags"] == ["--made-up-overlap"] and row["priced"] == knob_report.SWITCH_PRICING


def test_inspect_prints_the_section_as_text_and_json():
    text = invoke_cli("inspect", str(_QWEN3))
    assert text.returncode == 0, text.stderr
    assert "knobs" in text.stdout and "--moe-alltoall-overlap-comm" in text.stdout
    as_json = invoke_cli("inspect", "--json", str(_QWEN3))
    data = json.loads(as_json.stdout)
    assert data["knobs"]["ep"]["value"] == data["strategy"]["ep"]
    assert "dist_opt" not in data["strategy"] and "dist_opt" not in data["knobs"]


def test_searched_is_judged_at_the_script_model_and_layout():
    """A switch the search cannot set for this script's model and layout (it does not exist
    there: its value is None) is not searched: the MindSpeed allgather overlap on an alltoall
    model. The same script with the allgather dispatcher: the search sets it (knobs.search_choices
    and the column share Knob.set_by_search)."""
    key = "moe_allgather_overlap_comm"
    section = knob_report.knob_section(read_script(_QWEN3))
    assert section[key]["value"] is None and section[key]["searched"] is False
    switches = [section[knob.key] for knob in knobs.OVERLAP_KNOBS]
    assert not any(row["searched"] for row in switches if row["value"] is None)
    text = _QWEN3.read_text().replace(
        "--moe-token-dispatcher-type alltoall", "--moe-token-dispatcher-type allgather"
    )
    row = knob_report.knob_section(read_script_text(text))[key]
    assert row["value"] is False and row["searched"] is True
