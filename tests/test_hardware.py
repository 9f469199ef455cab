"""Hardware descriptions: shipped files, schema, efficiency curves, JSON round trip, comm table, fits."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinker_opt.comm_cost import collective_time_us
from tinker_opt.errors import ConfigError
from tinker_opt.hardware import (
    DeviceEfficiency,
    EfficiencyCurve,
    HardwareSpec,
    comm_table,
    load_hardware,
    shipped_hardware,
)
from tinker_opt.hardware.fit import TimedOps, bounded_lstsq, fit_efficiency, fit_link

SHIPPED = (
    "910b",
    "a100-40gb",
    "a100-80gb",
    "h100-80gb",
    "atlas-a3",
    "h200-141gb",
    "b200",
    "gb200-nvl72",
    "mi300x",
    "mi325x",
    "mi355x",
)


def test_shipped_descriptions_are_listed() -> None:
    """The four issue-6 descriptions ship with the package."""
    assert set(SHIPPED) <= set(shipped_hardware())


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_file_names_sources_and_assumptions(name: str) -> None:
    """Each shipped file loads and carries sources and an assumptions list."""
    hardware = load_hardware(name)
    assert hardware.sources and all("fact" in s for s in hardware.sources)
    assert isinstance(hardware.assumptions, list)
    assert hardware.efficiency.notes, "efficiency curves must say where they come from"


@pytest.mark.parametrize("name", SHIPPED)
def test_json_round_trip(name: str) -> None:
    """to_dict() gives back an equal description through from_dict."""
    hardware = load_hardware(name)
    again = HardwareSpec.from_dict(json.loads(json.dumps(hardware.to_dict())))
    assert again == hardware


def test_user_file_is_loaded_by_path(tmp_path) -> None:
    """A user's own JSON file is read by path, with efficiency curves of either form."""
    data = load_hardware("a100-80gb").to_dict()
    data["name"] = "my device"
    data["efficiency"]["memory"] = {"points": [[1e3, 0.1], [1e6, 0.5], [1e9, 0.9]]}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    hardware = load_hardware(path)
    assert hardware.name == "my device"
    assert hardware.efficiency.memory.efficiency(1e6) == pytest.approx(0.5)


def test_missing_key_is_a_config_error(tmp_path) -> None:
    """A file without a required key fails with a ConfigError naming it."""
    data = load_hardware("a100-80gb").to_dict()
    del data["memory_bandwidth_gbs"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="memory_bandwidth_gbs"):
        load_hardware(path)


def test_unknown_efficiency_key_is_rejected() -> None:
    """A typo in the efficiency section is an error, not silently ignored."""
    with pytest.raises(ConfigError, match="matmull"):
        DeviceEfficiency.from_dict({"matmull": {}})


def test_efficiency_above_one_is_rejected() -> None:
    """An efficiency curve cannot promise more than the peak."""
    with pytest.raises(ConfigError):
        EfficiencyCurve(max_efficiency=1.2)


def test_unknown_hardware_lists_shipped_names() -> None:
    """An unknown name says which descriptions exist."""
    with pytest.raises(ConfigError, match="a100-80gb"):
        load_hardware("no-such-device")


@given(st.floats(1e3, 1e13), st.floats(1.0, 10.0))
def test_saturating_curve_is_monotone_and_bounded(size: float, factor: float) -> None:
    """Bigger ops are at least as efficient, and never above max_efficiency."""
    curve = EfficiencyCurve(max_efficiency=0.8, half_size=1e9)
    small, big = curve.efficiency(size), curve.efficiency(size * factor)
    assert small <= big <= 0.8


@given(st.floats(1.0, 1e12))
def test_time_is_size_over_rate_at_efficiency(size: float) -> None:
    """time_us equals size / (peak x efficiency) for both curve forms."""
    peak = 312e6
    for curve in (EfficiencyCurve(0.7, 2e9), EfficiencyCurve(points=((1e6, 0.2), (1e10, 0.8)))):
        expected = size / (peak * curve.efficiency(size))
        assert float(curve.time_us(size, peak)) == pytest.approx(float(expected), rel=1e-9)


def test_zero_size_op_takes_no_time() -> None:
    """An op without FLOPs (or bytes) adds nothing on that roof."""
    assert float(EfficiencyCurve(0.7, 2e9).time_us(0.0, 312e6)) == 0.0


def test_peak_of_unlisted_precision_falls_back() -> None:
    """fp32 falls back to the slowest listed peak, 16-bit formats to the fastest."""
    hardware = load_hardware("a100-80gb")
    data = hardware.to_dict()
    data["peak_tflops"] = {"bf16": 312.0}
    only_bf16 = HardwareSpec.from_dict(data)
    assert only_bf16.peak_flops_per_us("fp16") == 312e6
    assert hardware.peak_flops_per_us("fp32") == 19.5e6


def test_comm_table_matches_the_collective_formula() -> None:
    """Every comm.csv row from a description is collective_time_us of its link."""
    hardware = load_hardware("a100-80gb")
    table = comm_table(hardware, max_group_size=8)
    row = table[
        (table.op == "all_reduce") & (table.group_size == 8) & (table.scope == "intra_node")
    ].iloc[-1]
    expected = collective_time_us("all_reduce", 8, row.bytes, 195, 5)
    assert row.time_us == pytest.approx(expected, abs=1e-3)


def test_bounded_lstsq_respects_bounds() -> None:
    """The bounded solve clamps a coefficient the data would push below its bound."""
    a = np.array([[1.0, 0.0], [0.0, 1.0]])
    x = bounded_lstsq(a, np.array([2.0, -3.0]), np.array([0.0, 0.0]))
    assert x == pytest.approx([2.0, 0.0])


def _synthetic_samples(true: DeviceEfficiency, bandwidth: float, seed: int = 0) -> list[TimedOps]:
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(25):
        flops = np.where(rng.random(16) < 0.4, 10 ** rng.uniform(8, 12, 16), 0.0)
        nbytes = 10 ** rng.uniform(4, 9, 16)
        peak = np.full(16, 312e6)
        t = np.maximum(
            true.matmul.time_us(flops, peak), true.memory.time_us(nbytes, bandwidth)
        ).sum()
        samples.append(TimedOps(flops, nbytes, peak, float(t)))
    return samples


def test_fit_efficiency_recovers_known_curves() -> None:
    """Fitting times made with known curves gives those curves back."""
    true = DeviceEfficiency(matmul=EfficiencyCurve(0.7, 2e9), memory=EfficiencyCurve(0.9, 3e6))
    fitted, result = fit_efficiency(_synthetic_samples(true, 2.0e6), 2.0e6)
    assert fitted.matmul.max_efficiency == pytest.approx(0.7, rel=1e-4)
    assert fitted.memory.half_size == pytest.approx(3e6, rel=1e-3)
    assert result.max_abs_rel_error < 1e-5


def test_fit_link_recovers_latency_and_bandwidth() -> None:
    """Fitting alpha-beta times gives the latency and bandwidth back."""
    ops, groups, sizes = (
        ["all_reduce", "all_gather", "send_recv", "reduce_scatter"],
        [8, 8, 2, 4],
        [1e6, 1e8, 1e7, 1e5],
    )
    times = [
        collective_time_us(o, g, b, 150.0, 7.0) for o, g, b in zip(ops, groups, sizes, strict=True)
    ]
    latency_us, bandwidth_gbs, _ = fit_link(ops, groups, sizes, times)
    assert latency_us == pytest.approx(7.0, rel=1e-6)
    assert bandwidth_gbs == pytest.approx(150.0, rel=1e-6)


@settings(max_examples=20, deadline=None)
@given(st.floats(0.3, 1.0), st.floats(1e7, 1e10))
def test_fit_efficiency_recovers_any_matmul_curve(max_eff: float, half: float) -> None:
    """The fit finds any saturating matmul curve it is given data for (property)."""
    true = DeviceEfficiency(matmul=EfficiencyCurve(max_eff, half), memory=EfficiencyCurve(0.8, 1e6))
    fitted, _ = fit_efficiency(_synthetic_samples(true, 2.0e6, seed=1), 2.0e6)
    assert fitted.matmul.max_efficiency == pytest.approx(max_eff, rel=1e-3)


@pytest.mark.parametrize(
    ("name", "per_node", "domain", "library"),
    [
        ("atlas-a3", 16, 768, "hccl"),
        ("h200-141gb", 8, 8, "nccl"),
        ("b200", 8, 8, "nccl"),
        ("gb200-nvl72", 4, 72, "nccl"),
        ("mi300x", 8, 8, "rccl"),
        ("mi325x", 8, 8, "rccl"),
        ("mi355x", 8, 8, "rccl"),
    ],
)
def test_todays_descriptions_state_their_network(name, per_node, domain, library) -> None:
    """The issue-19 descriptions: devices per node, the high-bandwidth domain and the library."""
    hardware = load_hardware(name)
    assert (hardware.devices_per_node, hardware.domain_devices, hardware.collectives) == (
        per_node,
        domain,
        library,
    )
    assert hardware.assumptions, "the unknowns are listed"


def test_domain_must_hold_whole_nodes() -> None:
    """A domain that is not a whole number of nodes is refused with both numbers."""
    data = load_hardware("gb200-nvl72").to_dict()
    data["domain"]["size"] = 70
    with pytest.raises(ConfigError, match=r"domain size \(70\).*devices_per_node \(4\)"):
        HardwareSpec.from_dict(data)
