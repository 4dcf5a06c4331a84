"""ncu CSV reader: the real H200 captures (raw and details pages) and hand-written edge files."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kernelscope.errors import ParseError
from kernelscope.parsers import detect_format, open_trace
from kernelscope.parsers.ncu import kernel_name_key, parse_value, read_ncu_csv, unit_factor

NSIGHT = Path(__file__).resolve().parents[2] / "sample_traces" / "nsight"
RAW = NSIGHT / "encoder2_ncu_raw.csv.gz"
DETAILS = NSIGHT / "encoder2_ncu_details.csv.gz"


def test_detect():
    assert detect_format(RAW) == "ncu" and detect_format(DETAILS) == "ncu"
    with pytest.raises(ParseError, match="Nsight Compute CSV"):
        open_trace(RAW)
    with pytest.raises(ParseError, match="not an Nsight Compute export"):
        detect_format(NSIGHT / "encoder2_nvtx_cuda_gpu_kern_sum.csv")


def test_raw_page_real_capture():
    rep = read_ncu_csv(RAW)
    assert rep.page == "raw" and len(rep.kernels) == 60
    assert [k.ncu_id for k in rep.kernels] == list(range(60))
    k = rep.kernels[1]  # first cuBLAS GEMM of the first forward; values read off the CSV by hand
    assert k.name.startswith("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8")
    assert (k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z) == (16, 24, 1, 64, 1, 1)
    assert k.registers_per_thread == 80 and k.shared_memory_bytes == 6912  # static 0 + dynamic 6,912
    assert k.duration_ns == 16768  # "16,768" ns
    assert k.dram_throughput_pct == 1.67 and k.sm_throughput_pct == 42.11 and k.memory_throughput_pct == 64.18
    assert k.achieved_occupancy_pct == pytest.approx(8.88, abs=0.01)
    assert k.sm_clock_hz == pytest.approx(1.45e9, rel=0.02)  # clocks locked to base (boost is 1.98 GHz)
    assert k.dram_bytes_read is None  # the default (basic) set does not collect dram__bytes
    assert any("dram_bytes_read" in w for w in rep.warnings)


def test_details_page_real_capture():
    rep = read_ncu_csv(DETAILS)
    assert rep.page == "details" and len(rep.kernels) == 20
    k = rep.kernels[1]
    assert (k.grid_x, k.grid_y, k.block_x) == (16, 24, 64)
    assert k.registers_per_thread == 80 and k.shared_memory_bytes == 6912
    assert k.duration_ns == 16864 and k.sm_throughput_pct == 42.24
    assert k.sm_clock_hz == pytest.approx(1450130455.41)


EDGE = """==PROF== Connected to process 1 (/usr/bin/python3)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active","gpc__cycles_elapsed.avg.per_second","launch__registers_per_thread"
"","","","","","","","","","","","usecond","Kbyte","Mbyte","%","%","cycle/nsecond","register/thread"
"0","1","python3","h","void k<(int)4>(int)","1","7","(128, 1, 1)","(1,024, 2, 1)","0","9.0","1,234.5","2,048","n/a","55.5","n/a","1.98","32"
==WARNING== something happened
"1","1","python3","h","other_kernel","1","7","(32, 1, 1)","(4, 1, 1)","0","9.0","0.5","1","0.25","n/a","12","1.5","n/a"
==PROF== Disconnected from process 1
"""


def test_units_row_scaling_separators_na_and_prof_lines(tmp_path):
    p = tmp_path / "edge.csv.gz"
    p.write_bytes(gzip.compress(EDGE.encode()))
    assert detect_format(p) == "ncu"
    rep = read_ncu_csv(p)
    a, b = rep.kernels
    assert (a.grid_x, a.grid_y, a.grid_z) == (1024, 2, 1)
    assert a.duration_ns == 1234500 and a.dram_bytes_read == 2_048_000 and a.dram_bytes_write is None
    assert a.sm_throughput_pct == 55.5 and a.achieved_occupancy_pct is None and a.registers_per_thread == 32
    assert a.sm_clock_hz == pytest.approx(1.98e9)
    assert b.duration_ns == 500 and b.dram_bytes_read == 1000 and b.dram_bytes_write == 250_000
    assert b.registers_per_thread is None and b.launch_index == 1


def test_units():
    assert unit_factor("nsecond") == 1 and unit_factor("usecond") == 1e3 and unit_factor("msecond") == 1e6
    assert unit_factor("second") == 1e9 and unit_factor("Kbyte") == 1e3 and unit_factor("Gbyte") == 1e9
    assert unit_factor("KiB") == 1024 and unit_factor("Ghz") == 1e9 and unit_factor("hz") == 1
    assert unit_factor("%") == 1 and unit_factor("byte/block") == 1
    assert parse_value("3,161,184,210.53", "hz") == pytest.approx(3161184210.53)
    assert parse_value("n/a", "%") is None and parse_value("all") is None


def test_kernel_name_key_bridges_demanglers():
    ncu = "void at::vectorized_elementwise_kernel<4, at::CUDAFunctor_add<float>, std::array<char *, 3>>(int, T2, T3)"
    cupti = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, "
             "std::array<char *, (unsigned long)3>>(int, T2, T3)")
    assert kernel_name_key(ncu) == kernel_name_key(cupti) == "vectorized_elementwise_kernel"
    assert kernel_name_key("void at::<unnamed>::vectorized_layer_norm_kernel<float, float, 0>(int)") == \
        "vectorized_layer_norm_kernel"
    assert kernel_name_key("sm80_xmma_gemm_f32") == "sm80_xmma_gemm_f32"


@pytest.mark.parametrize("text,match", [
    ("Time (%),Total Time (ns),Name\n1,2,k\n", "not an Nsight Compute export"),
    ("==PROF== Connected to process 1\n==PROF== Disconnected from process 1\n", "profiled no kernel"),
])
def test_not_ncu(tmp_path, text, match):
    p = tmp_path / "x.csv"
    p.write_text(text)
    with pytest.raises(ParseError, match=match):
        read_ncu_csv(p)
