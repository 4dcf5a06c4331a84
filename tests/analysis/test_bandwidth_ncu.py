"""bandwidth: Nsight Compute DRAM bytes beside the modelled bytes, on the encoder2 sample (the Kineto
twin of the ncu capture). Checked a second way: the ncu CSV read here with the csv module and paired with
the trace's kernels by launch order (CAPTURE_NOTES.md: ncu launch 0 is the input's randn kernel, launches
1..59 are the forward kernels in the order the trace ran them), independent of storage/ncu.py's pairing
by kernel name, grid and block."""

from __future__ import annotations

import csv
import gzip
from collections import defaultdict

import pandas as pd
import pytest
from conftest import ROOT

from kernelscope.analysis.bandwidth import bandwidth
from kernelscope.storage.ingest import ingest_file
from kernelscope.storage.ncu import ingest_ncu
from kernelscope.storage.store import open_store

NSIGHT = ROOT / "sample_traces" / "nsight"
DRAM = NSIGHT / "encoder2_ncu_dram.csv.gz"
RAW = NSIGHT / "encoder2_ncu_raw.csv.gz"
TWIN = NSIGHT / "encoder2_kineto" / "trace.json.gz"


def _csv_bytes() -> list[int]:
    """dram__bytes_read.sum + dram__bytes_write.sum per ncu launch (ID order), from the CSV itself."""
    lines = [ln for ln in gzip.open(DRAM, "rt", encoding="utf-8") if not ln.startswith("==")]
    rows = list(csv.reader(lines))
    head, units, data = rows[0], rows[1], rows[2:]
    r, w, i = head.index("dram__bytes_read.sum"), head.index("dram__bytes_write.sum"), head.index("ID")
    assert units[r] == units[w] == "byte"
    data.sort(key=lambda row: int(row[i]))
    return [int(row[r].replace(",", "")) + int(row[w].replace(",", "")) for row in data]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not (DRAM.exists() and TWIN.exists()):
        pytest.fail("Nsight sample files not present")
    s = open_store(tmp_path_factory.mktemp("ncu") / "s.duckdb")
    t = ingest_file(s, TWIN).trace_id
    res = ingest_ncu(s, DRAM, match=t)
    assert (res.status, res.matched) == ("ingested", 59)
    assert ingest_ncu(s, RAW, match=t).status == "ingested"  # no DRAM bytes in it: must not count
    yield s, t
    s.close()


def test_measured_beside_modelled_second_way(pair):
    store, t = pair
    r = bandwidth(store, t, instances="all")
    inst = r.table("per_instance").set_index("op_id")
    # the reference: launch k (1..59) pairs with the trace's k-th kernel by start time
    csv_b = _csv_bytes()
    assert len(csv_b) == 60
    kernels = store.query("SELECT activity_id, leaf_op_id FROM gpu_activities WHERE trace_id = $t AND kind = 'kernel' "
                          "ORDER BY start_ns, activity_id", {"t": t})
    per_op, n_k, n_measured = defaultdict(int), defaultdict(int), defaultdict(int)
    for k, op in enumerate(kernels["leaf_op_id"]):
        n_k[int(op)] += 1
        if k + 1 < len(csv_b):
            per_op[int(op)] += csv_b[k + 1]
            n_measured[int(op)] += 1
    want = {op: b for op, b in per_op.items() if n_measured[op] == n_k[op]}
    got = inst["measured_bytes"].dropna().astype("int64").to_dict()
    assert got == want and len(got) == r.scalars["measured_instances"] == 49
    # partly measured operators (a kernel past launch 59) have no measured bytes
    partly = [op for op in n_k if 0 < n_measured[op] < n_k[op]]
    assert all(pd.isna(inst.loc[op, "measured_bytes"]) for op in partly)
    assert r.trust["measured_from"] == "ncu" and any("Nsight Compute" in w for w in r.warnings)
    # per kernel: the 59 matched kernels with their CSV bytes
    mk = r.table("measured_kernels")
    assert len(mk) == 59 and int(mk["measured_bytes"].sum()) == sum(csv_b[1:])
    assert set(mk["cache_control"]) == {"all"} and set(mk["clock_control"]) == {"base"}


def test_layer_norm_by_hand(pair):
    store, t = pair
    r = bandwidth(store, t, instances="all")
    inst = r.table("per_instance")
    ln = inst[inst["name"] == "aten::native_layer_norm"].sort_values("op_id").iloc[0]
    # ncu launch 5 (CAPTURE_NOTES): the first layer norm read 551,168 B and wrote 0 B of DRAM.
    # modelled [4,128,256] fp32 over [256]: x 131,072*4 = 524,288 + weight and bias 2*256*4 = 2,048
    # + out 524,288 + mean and rstd 2*512*4 = 4,096 -> 1,054,720 B; ratio 1,054,720 / 551,168 = 1.91362
    assert (ln["measured_bytes"], ln["bytes"]) == (551_168, 1_054_720)
    assert ln["modelled_over_measured"] == pytest.approx(1_054_720 / 551_168)
    assert ln["measured_gbps"] == pytest.approx(551_168 / ln["gpu_ns"])  # over the traced time
    # per signature: sums over the measured calls only; the ratio of modelled to measured sums
    sig = r.table("per_signature").set_index("name").loc["aten::native_layer_norm"]
    m = inst[(inst["name"] == "aten::native_layer_norm") & inst["measured_bytes"].notna()]
    assert sig["measured_calls"] == len(m)
    assert sig["measured_bytes"] == int(m["measured_bytes"].sum())
    assert sig["modelled_over_measured"] == pytest.approx(len(m) * 1_054_720 / int(m["measured_bytes"].sum()))
    assert sig["measured_gbps"] == pytest.approx(int(m["measured_bytes"].sum()) / int(m["gpu_ns"].sum()))


def test_no_ncu_rows_no_measured_columns(tmp_path):
    s = open_store(tmp_path / "s.duckdb")
    t = ingest_file(s, TWIN).trace_id
    r = bandwidth(s, t)
    assert "measured_bytes" not in r.table("per_instance") and "measured_kernels" not in r.tables
    assert r.trust["measured_bytes"] is False and r.trust["measured_from"] is None
    s.close()


def test_the_reports_measured_table_is_numbered_and_shaped_as_the_top_table(pair):
    """Mixtral's report listed 71 measured signatures by bare number (numbers its top table did not show); the
    table now holds the top ones by GPU time (15 by default), each with its number, operator and input shapes
    as the top table."""
    from kernelscope.reports.blocks import Context, Table
    from kernelscope.reports.roofline import roofline_section

    s, t = pair
    r = bandwidth(s, t)
    sig = r.table("per_signature").reset_index(drop=True)
    measured = [i for i, n in enumerate(sig["measured_calls"]) if n > 0]
    sec = roofline_section(s, [t], Context(figures=False), top=5)
    top = next(b for b in sec.blocks if isinstance(b, Table) and "operator signatures" in b.caption)
    mm = next(b for b in sec.blocks if isinstance(b, Table) and "measured bytes" in b.caption)
    assert len(measured) == 7 and mm.df["#"].tolist() == measured[:5]
    assert "top 5 of 7 measured signatures by GPU time" in mm.caption
    whole = roofline_section(s, [t], Context(figures=False))  # all 7 shown: the caption says no "top"
    assert [b.caption for b in whole.blocks if isinstance(b, Table) and "measured bytes" in b.caption] == [
        "encoder2_kineto: modelled vs Nsight Compute measured bytes (ncu flushes caches and locks clocks)"]
    for _, row in mm.df.iterrows():
        ref = sig.iloc[row["#"]]
        assert (row["operator"], row["input shapes"]) == (ref["name"], ref["input_dims"])
        assert row["calls measured"] == ref["measured_calls"] and row["measured bytes (ncu DRAM)"] == ref["measured_bytes"]
    shown = top.df.set_index("#")
    assert all(shown.loc[i, "operator"] == mm.df.set_index("#").loc[i, "operator"] for i in mm.df["#"] if i in shown.index)
