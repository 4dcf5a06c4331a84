"""NVML sampler without a GPU: a fake pynvml replaces the module attribute at the one import site."""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_pynvml import FakeNVML  # noqa: E402

from kernelscope.collectors import nvml  # noqa: E402

UUIDS = ["GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000",
         "GPU-cccccccc-0000-0000-0000-000000000000"]


@pytest.fixture
def fake(monkeypatch):
    def install(**kw):
        f = FakeNVML(kw.pop("uuids", UUIDS), **kw)
        monkeypatch.setattr(nvml, "pynvml", f)
        return f

    return install


def _run(sampler, seconds):
    sampler.start()
    time.sleep(seconds)
    return sampler.stop()


def test_rows_have_schema_and_device_values(fake):
    fake()
    s = nvml.make_sampler(devices=[UUIDS[1]], period_ms=5, slow_period_ms=50)
    t = _run(s, 0.3)
    assert t.schema == nvml.TELEMETRY_SCHEMA
    d = t.to_pydict()
    assert set(d["device_uuid"]) == {UUIDS[1]} and set(d["device_index"]) == {1}
    assert set(d["power_mw"]) == {2000} and set(d["power_instant_mw"]) == {2001}
    assert d["energy_mj"] == sorted(d["energy_mj"]) and len(set(d["energy_mj"])) == t.num_rows
    # slow fields only every ~10th row; fast fields on every row
    slow = [r for r in d["sm_clock_mhz"] if r is not None]
    assert 1 <= len(slow) < t.num_rows / 3
    assert set(slow) == {1980}
    assert 20 <= t.num_rows <= 70  # 300 ms at a 5 ms period
    assert 4.5 <= s.achieved_period_ms <= 10


def test_unsupported_fields_are_null_and_not_retried(fake):
    f = fake(unsupported_fields={186}, unsupported_calls={"nvmlDeviceGetTemperature"})
    s = nvml.make_sampler(devices=[UUIDS[0]], period_ms=5, slow_period_ms=5)
    t = _run(s, 0.2).to_pydict()
    assert len(t["ts_ns"]) >= 10
    assert all(v is None for v in t["power_instant_mw"])
    assert all(v is None for v in t["temperature_c"])
    assert all(v == 1000 for v in t["power_mw"])  # the supported field of the same batch is kept
    assert all(v == 4 for v in t["throttle_reasons"])
    assert f.calls["nvmlDeviceGetTemperature"] == 1  # asked once, remembered as unsupported
    assert {"power_instant_mw", "temperature_c"} <= set(s.info()["devices"][0]["unsupported"])


def test_field_values_unsupported_falls_back_to_power_usage(fake):
    fake(unsupported_calls={"nvmlDeviceGetFieldValues"})
    s = nvml.make_sampler(devices=[UUIDS[0]], period_ms=5)
    t = _run(s, 0.1).to_pydict()
    assert set(t["power_mw"]) == {777}
    assert all(v is None for v in t["power_instant_mw"])
    assert t["energy_mj"][0] == 1_000_000  # nvmlDeviceGetTotalEnergyConsumption


def test_reordered_cuda_visible_devices_match_by_uuid(fake, monkeypatch):
    """CUDA_VISIBLE_DEVICES=2,0: CUDA ordinal 0 is NVML index 2, ordinal 1 is NVML index 0."""
    fake()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    # torch spells UUIDs without the GPU- prefix
    monkeypatch.setattr(nvml, "_cuda_device_uuids", lambda devices=None: [UUIDS[2][4:], UUIDS[0][4:]])
    s = nvml.make_sampler(period_ms=5)
    assert [d.index for d in s.devices] == [2, 0]
    t = _run(s, 0.1).to_pydict()
    by_dev = {}
    for u, i, p in zip(t["device_uuid"], t["device_index"], t["power_mw"]):
        by_dev.setdefault(u, set()).add((i, p))
    assert by_dev == {UUIDS[2]: {(2, 3000)}, UUIDS[0]: {(0, 1000)}}


def test_one_second_stall_keeps_sampling_with_real_timestamps(fake):
    f = fake(stall=("nvmlDeviceGetFieldValues", 5, 1.0))
    s = nvml.make_sampler(devices=[UUIDS[0]], period_ms=10)
    s.start()
    time.sleep(1.4)
    alive = s._thread.is_alive()
    t0 = time.time_ns()
    table = s.stop()
    ts = table.column("ts_ns").to_pylist()
    assert alive
    assert ts == sorted(ts)
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    big = [g for g in gaps if g > 500e6]
    assert len(big) == 1 and 1.0e9 <= big[0] < 1.1e9  # the stall is visible as one gap
    # the stalled sample is stamped when its values were actually read (after the stall), not on schedule
    assert any(0 <= x - f.stall_end_ns < 5e6 for x in ts)
    after = [x for x in ts if x > f.stall_end_ns]
    assert len(after) >= 10  # it kept sampling after the stall (about 0.4 s at 10 ms)
    assert ts[-1] <= t0
    assert s.max_gap_ms >= 1000


def test_null_sampler_says_once_why(fake):
    fake(init_error=9)
    s = nvml.make_sampler()
    assert isinstance(s, nvml.NullSampler)
    assert "NVML could not be initialised" in s.reason
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        s.start()
        t = s.stop()
    assert len(w) == 1 and "no GPU telemetry" in str(w[0].message)
    assert t.num_rows == 0 and t.schema == nvml.TELEMETRY_SCHEMA


def test_no_matching_uuid_gives_null_sampler(fake):
    fake()
    s = nvml.make_sampler(devices=["GPU-deadbeef"], quiet=True)
    assert isinstance(s, nvml.NullSampler) and "no NVML device matches" in s.reason


def test_device_info_for_provenance(fake):
    fake()
    info = nvml.device_info([UUIDS[1]])
    assert len(info) == 1
    i = info[0]
    assert i["nvml_index"] == 1 and i["uuid"] == UUIDS[1] and i["name"] == "Fake H100"
    assert i["pci_bus_id"] == "00000000:02:00.0" and i["power_limit_mw"] == 700_000
    assert i["mig_mode"] is None and i["ecc_mode"] == [1, 1] and i["sm_clock_max_mhz"] == 1980
    assert nvml.driver_info() == {"driver_version": "580.00.01", "driver_cuda_version": "13.0"}


def test_pci_fallback_when_uuids_differ(fake, monkeypatch):
    """A CUDA UUID NVML does not know (e.g. MIG) is matched by the PCI address instead."""
    fake()
    monkeypatch.setattr(nvml, "_cuda_device_uuids", lambda devices=None: ["11111111-0000"])
    monkeypatch.setattr(nvml, "_cuda_device_pci", lambda devices=None: [(0, 3, 0)])  # NVML index 2
    s = nvml.make_sampler(quiet=True)
    assert [d.index for d in s.devices] == [2]


def test_nvml_own_timestamps_are_used_when_plausible(fake):
    f = fake(stamp="read")
    s = nvml.make_sampler(devices=[UUIDS[0]], period_ms=5)
    t = _run(s, 0.1)
    assert t.column("ts_ns").to_pylist() == [u * 1000 for u in f.stamps_us[: t.num_rows]]
    assert s.info()["nvml_stamped"] == t.num_rows


def test_implausible_nvml_timestamps_fall_back_to_host_clock(fake):
    fake(stamp="bogus")
    s = nvml.make_sampler(devices=[UUIDS[0]], period_ms=5)
    t0 = time.time_ns()
    t = _run(s, 0.1)
    assert all(x >= t0 for x in t.column("ts_ns").to_pylist())
    assert s.info()["nvml_stamped"] == 0
