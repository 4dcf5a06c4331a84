"""The Nsight passes (collectors/nsight.py, nsight_ncu.py) and the ingest of a run dir that holds them, without a GPU:
tool discovery and its one-line messages, the libdw check, the argv built, the ncu kernel choice against real kernel
names, FAKE nsys/ncu executables (Python scripts that record their argv and write the shipped samples) for the
passes end to end, and a run dir of the shipped encoder2 captures (Kineto + nsys SQLite + ncu CSV) in a store."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import stat
import sys
from pathlib import Path

import pytest

from kernelscope.collectors import nsight
from kernelscope.errors import KernelscopeError, UsageError
from kernelscope.parsers.ncu import kernel_name_key, read_ncu_csv

ROOT = Path(__file__).resolve().parents[2]
NSIGHT = ROOT / "sample_traces" / "nsight"
KINETO_ID = "40a74018239e"
REAL_GLOBS = dict(nsight.INSTALL_GLOBS)  # before any test points them into tmp_path  # sample_traces/README.md golden id of nsight/encoder2_kineto


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and msg
    return msg


# ---------------------------------------------------------------- finding the tools

@pytest.fixture
def no_tools(monkeypatch, tmp_path):
    """PATH empty of nsys/ncu and the install folders pointed into tmp_path (empty until a test fills them)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    opt = tmp_path / "opt"
    monkeypatch.setattr(nsight, "INSTALL_GLOBS", {
        "nsys": (str(opt / "cuda/bin/nsys"), str(opt / "nsight-systems/*/bin/nsys"),
                 str(opt / "nsight-compute/*/host/target-linux-x64/nsys")),
        "ncu": (str(opt / "cuda/bin/ncu"), str(opt / "nsight-compute/*/ncu"))})
    return opt


def test_absent_tools_say_what_to_install_in_one_line(no_tools):
    with pytest.raises(UsageError) as e:
        nsight.find_tool("nsys")
    msg = _one_line(e)
    assert "Nsight Systems (nsys) not found on PATH" in msg and "install it" in msg and "--nsys PATH" in msg
    with pytest.raises(UsageError) as e:
        nsight.find_tool("ncu", option="--ncu-path P")
    assert "Nsight Compute (ncu)" in _one_line(e) and "--ncu-path P" in str(e.value)


def test_explicit_path_missing_or_not_executable(no_tools, tmp_path):
    with pytest.raises(UsageError) as e:
        nsight.find_tool("nsys", tmp_path / "nowhere" / "nsys")
    assert "does not exist" in _one_line(e) and str(tmp_path / "nowhere" / "nsys") in str(e.value)
    plain = tmp_path / "plain" / "nsys"
    plain.parent.mkdir()
    plain.write_text("")
    with pytest.raises(UsageError) as e:
        nsight.find_tool("nsys", plain)
    assert "is not executable" in _one_line(e)
    good = _exe(tmp_path / "tooldir" / "nsys", "#!/bin/sh\n")
    assert nsight.find_tool("nsys", good) == good
    assert nsight.find_tool("nsys", good.parent) == good  # a folder holding the tool


def test_discovery_order_path_then_install_folders_newest_first(no_tools, tmp_path, monkeypatch):
    # the real list holds the GPU machine's nsys (bundled with Nsight Compute) and the usual folders
    real = REAL_GLOBS
    assert "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys" in real["nsys"]
    assert real["nsys"][0] == "/usr/local/cuda/bin/nsys" and "/opt/nvidia/nsight-systems/*/bin/nsys" in real["nsys"]
    bundled = _exe(no_tools / "nsight-compute/2025.3.1/host/target-linux-x64/nsys", "#!/bin/sh\n")
    assert nsight.find_tool("nsys") == bundled
    old = _exe(no_tools / "nsight-systems/2024.6.2/bin/nsys", "#!/bin/sh\n")
    new = _exe(no_tools / "nsight-systems/2025.10.1/bin/nsys", "#!/bin/sh\n")  # 10 > 6 as a number, not text
    assert nsight.install_candidates("nsys") == [new, old, bundled]
    assert nsight.find_tool("nsys") == new
    cuda = _exe(no_tools / "cuda/bin/nsys", "#!/bin/sh\n")
    assert nsight.find_tool("nsys") == cuda
    on_path = _exe(tmp_path / "bin" / "nsys", "#!/bin/sh\n")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert nsight.find_tool("nsys") == on_path
    explicit = _exe(tmp_path / "mine" / "nsys", "#!/bin/sh\n")
    assert nsight.find_tool("nsys", str(explicit)) == explicit


# ---------------------------------------------------------------- libdw

def test_libdw_missing_from_nsys_importer_is_one_line_naming_the_package(tmp_path, monkeypatch):
    nsys = _exe(tmp_path / "nsys-root" / "target-linux-x64" / "nsys", "#!/bin/sh\n")
    importer = _exe(tmp_path / "nsys-root" / "host-linux-x64" / "QdstrmImporter", "#!/bin/sh\n")
    assert nsight.find_importer(nsys) == importer
    ldd_out = tmp_path / "ldd.out"
    ldd = _exe(tmp_path / "ldd", f"#!/bin/sh\ncat {ldd_out}\n")
    monkeypatch.setattr(nsight, "LDD", str(ldd))
    ldd_out.write_text("\tlibstdc++.so.6 => /lib/libstdc++.so.6 (0x1)\n\tlibdw.so.1 => not found\n")
    with pytest.raises(UsageError) as e:
        nsight.check_nsys_importer(nsys)
    msg = _one_line(e)
    assert "libdw.so.1" in msg and "libdw1" in msg and "LD_LIBRARY_PATH" in msg and str(importer) in msg
    ldd_out.write_text("\tlibdw.so.1 => /usr/lib/x86_64-linux-gnu/libdw.so.1 (0x1)\n")
    nsight.check_nsys_importer(nsys)  # all found: no error
    # no importer beside nsys: whether libdw.so.1 loads at all decides
    lone = _exe(tmp_path / "lone" / "bin" / "nsys", "#!/bin/sh\n")
    monkeypatch.setattr(nsight, "LIBDW", "libkernelscope_absent.so.9")
    with pytest.raises(UsageError) as e:
        nsight.check_nsys_importer(lone)
    assert "libdw1" in _one_line(e) and "LD_LIBRARY_PATH" in str(e.value)


# ---------------------------------------------------------------- argv

def test_nsys_argv_with_and_without_capture_range(tmp_path):
    base = ["/x/nsys", "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
            "-o", str(tmp_path / "run")]
    assert nsight.nsys_prefix("/x/nsys", tmp_path / "run", False) == base
    assert nsight.nsys_prefix("/x/nsys", tmp_path / "run", True) == base + [
        "--capture-range=cudaProfilerApi", "--capture-range-end=stop"]


def test_ncu_argv(tmp_path):
    argv = nsight.ncu_prefix("/x/ncu", "^(.*::)?(k)$", 7, tmp_path / "a.csv")
    joined = " ".join(argv)
    assert argv[:7] == ["/x/ncu", "--csv", "--page", "raw", "--print-units", "base", "--log-file"]
    for pair in (("--kernel-name", "regex:^(.*::)?(k)$"), ("--launch-count", "7"), ("--clock-control", "base"),
                 ("--cache-control", "all"), ("--kernel-name-base", "function"), ("--set", "basic")):
        assert argv[argv.index(pair[0]) + 1] == pair[1]
    metrics = argv[argv.index("--metrics") + 1].split(",")
    assert {"dram__bytes_read.sum", "dram__bytes_write.sum", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "sm__sass_thread_inst_executed_op_dfma_pred_on.sum", "sm__sass_thread_inst_executed_op_hadd_pred_on.sum",
            "gpu__time_duration.sum"} <= set(metrics)
    assert "--profile-from-start" not in joined
    on = nsight.ncu_prefix("/x/ncu", "k", 1, tmp_path / "a.csv", capture_range=True, clock_control="none")
    assert on[-2:] == ["--profile-from-start", "off"] and on[on.index("--clock-control") + 1] == "none"


def test_ncu_metrics_are_what_the_parser_reads_and_names_the_h200_capture_holds():
    from kernelscope.parsers.ncu import RAW_METRICS

    header = set()
    for f in ("encoder2_ncu_raw.csv.gz", "encoder2_ncu_dram.csv.gz"):
        lines = [ln for ln in gzip.open(NSIGHT / f, "rt").read().splitlines() if not ln.startswith("==")]
        header |= set(next(iter(__import__("csv").reader(lines[:1]))))
    for field, names in RAW_METRICS.items():
        assert any(n in nsight.NCU_METRICS for n in names), field  # every field the parser reads is asked for
    assert [m for m in nsight.NCU_METRICS if m not in header] == list(nsight.FLOP_METRICS)


# ---------------------------------------------------------------- kernel choice

def test_ncu_spec():
    assert nsight.parse_ncu_spec("top:5").top == 5 and nsight.parse_ncu_spec(" TOP:2 ").top == 2
    assert nsight.parse_ncu_spec("gemm|layer_norm").regex == "gemm|layer_norm"
    for bad in ("top:0", "top:x", "top:", "(", ""):
        with pytest.raises(UsageError) as e:
            nsight.parse_ncu_spec(bad)
        _one_line(e)


def test_kernel_regex_escapes_template_names():
    names = ["void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, "
             "float const*, float const*, float const*, float*, float*, float*)",
             "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::"
             "Sm80, true, 64, 64, 64, true, true>::Params)", "odd.kernel$1[2]"]
    rx = nsight.kernel_regex(names)
    assert rx == ("^(.*::)?(fmha_cutlassF_f32_aligned_64x64_rf_sm80|odd\\.kernel\\$1\\[2\\]|"
                  "vectorized_layer_norm_kernel)$")
    for good in ("vectorized_layer_norm_kernel", "at::native::vectorized_layer_norm_kernel", "odd.kernel$1[2]"):
        assert re.search(rx, good), good
    for bad in ("oddXkernel$1[2]", "vectorized_layer_norm_kernel2", "my_vectorized_layer_norm_kernel"):
        assert not re.search(rx, bad), bad


@pytest.fixture(scope="module")
def nsight_store(tmp_path_factory):
    """A store holding a run dir of the shipped encoder2 captures: Kineto trace, nsys SQLite, ncu CSV (the
    DRAM-bytes one), run.json with the ncu settings the pass records. Ingested twice (the second a no-op)."""
    from kernelscope.storage.ingest import ingest_paths
    from kernelscope.storage.store import open_store

    tmp = tmp_path_factory.mktemp("nsight")
    run = tmp / "runs" / "encoder2"
    shutil.copytree(NSIGHT / "encoder2_kineto", run)
    (run / "encoder2.sqlite").write_bytes(gzip.decompress((NSIGHT / "encoder2_nvtx.sqlite.gz").read_bytes()))
    (run / "encoder2.nsys-rep").write_bytes(b"kept, never ingested")
    (run / "encoder2_ncu.csv").write_bytes(gzip.decompress((NSIGHT / "encoder2_ncu_dram.csv.gz").read_bytes()))
    doc = json.loads((run / "run.json").read_text())
    doc["labels"]["sweep"] = "s1"
    (run / "run.json").write_text(json.dumps(doc))
    nsight.record_pass(run, "ncu", {"clock_control": "base", "cache_control": "all",
                                    "settings_note": nsight.settings_note("base", "all")})
    db = tmp / "s.duckdb"
    with open_store(db) as store:
        first = ingest_paths(store, [tmp / "runs"], progress=False)
        second = ingest_paths(store, [tmp / "runs"], progress=False)
        counts = {t: store.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("traces", "labels", "ncu_kernels", "gpu_activities", "telemetry")}
    return db, run, first, second, counts


def test_top_kernels_and_targets_against_real_kernel_names(nsight_store):
    from kernelscope.storage.ncu import top_kernels
    from kernelscope.storage.store import open_store

    db = nsight_store[0]
    with open_store(db, read_only=True) as store:
        top = top_kernels(store, KINETO_ID)
    assert int(top["launches"].sum()) == 66 and int(top["gpu_ns"].sum()) == 509563  # README golden numbers
    assert list(top["gpu_ns"]) == sorted(top["gpu_ns"], reverse=True)
    t = nsight.ncu_targets(nsight.parse_ncu_spec("top:3"), nsight.stored_kernels(db, KINETO_ID))
    assert t.names == ["sgemm_largek_lds64", "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1"
                       "_ffma_aligna4_alignc4_execute_kernel__5x_cublas", "fmha_cutlassF_f32_aligned_64x64_rf_sm80"]
    assert t.launches == t.launch_count == 6 + 12 + 6
    # ncu names the same kernels its own way (at::<unnamed>::, template args without casts): the function names of
    # the 60 launches of the shipped ncu capture that the regex selects are exactly the chosen kernels'
    ncu_rows = read_ncu_csv(NSIGHT / "encoder2_ncu_raw.csv.gz").kernels
    picked = [k for k in ncu_rows if re.search(t.regex, kernel_name_key(k.name))]
    assert {kernel_name_key(k.name) for k in picked} == set(t.names)
    one = nsight.ncu_targets(nsight.parse_ncu_spec("layer_norm"), top, max_launches=5)
    assert one.names == ["vectorized_layer_norm_kernel"] and one.launches == 12 and one.launch_count == 5
    assert len(one.kernels) == 1 and "(anonymous namespace)" in one.kernels[0]
    from kernelscope.collectors.nsight_passes import ncu_plan_line

    assert ncu_plan_line(t).startswith("ncu pass: 3 kernel names, 24 launches (sgemm_largek_lds64, ")
    assert ncu_plan_line(one) == ("ncu pass: 1 kernel name, the first 5 of their 12 traced launches "
                                  "(vectorized_layer_norm_kernel); ncu replays each launch, so hundreds take minutes: "
                                  "a regex (--ncu NAME_REGEX) or a shorter --schedule profiles fewer")
    with pytest.raises(UsageError) as e:
        nsight.ncu_targets(nsight.parse_ncu_spec("no_such_kernel"), top)
    assert "sgemm_largek_lds64" in _one_line(e)
    with pytest.raises(UsageError):
        nsight.ncu_targets(nsight.parse_ncu_spec("top:1"), [])


# ---------------------------------------------------------------- ingest of a run dir with every pass

def test_run_dir_with_nsys_and_ncu_is_one_run_of_two_traces(nsight_store):
    from kernelscope.analysis.comm import run_traces
    from kernelscope.storage import catalog
    from kernelscope.storage.queries import list_traces
    from kernelscope.storage.store import open_store

    db, run, first, second, counts = nsight_store
    assert [(Path(r.path).name, r.status) for r in first] == [
        ("trace.json.gz", "ingested"), ("encoder2.sqlite", "ingested"), ("encoder2_ncu.csv", "ingested")]
    assert [r.status for r in second] == ["skipped"] * 3  # re-ingest: nothing added
    with open_store(db, read_only=True) as store:
        again = {t: store.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in counts}
        assert again == counts
        tr = list_traces(store).set_index("trace_id")
        nsys_id = first[1].trace_id
        assert len(tr) == 2 and first[0].trace_id == KINETO_ID
        assert tr.loc[KINETO_ID, "format"] == "kineto" and tr.loc[nsys_id, "format"] == "nsys"
        assert tr.loc[nsys_id, "name"] == tr.loc[KINETO_ID, "name"] + "-nsys"
        assert tr.loc[KINETO_ID, "labels"] == {"collector": "kineto", "workload": "encoder2", "sweep": "s1"}
        assert tr.loc[nsys_id, "labels"] == {"collector": "nsys", "workload": "encoder2"}  # no second sweep point
        assert list(tr["rank"]) == [0, 0] and list(tr["kernels"]) == [66, 66] and list(tr["notes"]) == [[], []]
        rows = store.con.execute("SELECT trace_id, run_id, provenance IS NOT NULL FROM traces").fetchall()
        assert len({r[1] for r in rows}) == 1 and rows[0][1] and all(r[2] for r in rows)  # one run, both traces
        tel = store.con.execute("SELECT DISTINCT trace_id FROM telemetry").fetchall()
        assert tel == [(KINETO_ID,)]  # telemetry stays with the Kineto trace
        # two collectors of one process are not two ranks
        assert catalog.runs(store).empty and catalog.rank_of(store, KINETO_ID) is None
        assert run_traces(store, [KINETO_ID])[1] == [KINETO_ID]
        ncu = store.query("SELECT trace_id, count(*) AS n, count(activity_id) AS m, any_value(clock_control) AS clk, "
                          "any_value(cache_control) AS cache, any_value(settings_note) AS note "
                          "FROM ncu_kernels GROUP BY trace_id")
        assert len(ncu) == 1 and ncu["trace_id"][0] == KINETO_ID  # joined to the Kineto trace, not the nsys one
        assert (int(ncu["n"][0]), int(ncu["m"][0])) == (60, 59)  # CAPTURE_NOTES.md: 59/60 match
        assert (ncu["clk"][0], ncu["cache"][0]) == ("base", "all")
        assert "1.3-2.5x the traced ones" in ncu["note"][0] and "kernelscope profile --ncu" in ncu["note"][0]
        # the stored nsys trace equals `nsys stats --report cuda_gpu_kern_sum` on the same report
        check = nsight.kern_sum_check(store, nsys_id, NSIGHT / "encoder2_nvtx_cuda_gpu_kern_sum.csv")
    assert check["equal"] and check["kernels"] == (66, 66) and check["kernel_ns"] == (511421, 511421)
    assert check["mismatched"] == [] and check["names"] == (8, 8)
    # the Bandwidth page's measured bytes come with the settings and what they do to ncu's durations
    from kernelscope.analysis.bandwidth import bandwidth

    with open_store(db, read_only=True) as store:
        r = bandwidth(store, KINETO_ID)
    assert r.scalars["measured_instances"] > 0 and "ncu_duration_ns" in r.tables["measured_kernels"].columns
    note = [w for w in r.warnings if "Nsight Compute" in w]
    assert len(note) == 1 and "clock control 'base'" in note[0] and "1.3-2.5x the traced ones" in note[0]
    # ... and the Kineto trace does not (different names and times): the check can fail
    bad = nsight.kern_sum_check(db, KINETO_ID, NSIGHT / "encoder2_nvtx_cuda_gpu_kern_sum.csv")
    assert not bad["equal"] and bad["kernels"] == (66, 66) and bad["mismatched"]


def test_check_kern_sum_command(nsight_store, capsys):
    from kernelscope.collectors.nsight_ncu import _check_main

    db, first = nsight_store[0], nsight_store[2]
    csv_path = str(NSIGHT / "encoder2_nvtx_cuda_gpu_kern_sum.csv")
    assert _check_main(["check-kern-sum", str(db), first[1].trace_id, csv_path]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["equal"] and out["kernels"] == [66, 66]
    assert _check_main(["check-kern-sum", str(db), KINETO_ID, csv_path]) == 1
    capsys.readouterr()
    assert _check_main(["check-kern-sum", str(db), "no-such-trace", csv_path]) == 2
    assert _check_main(["check-kern-sum", str(db), KINETO_ID, str(NSIGHT / "CAPTURE_NOTES.md")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "no trace matches" in err[0] and "cuda_gpu_kern_sum" in err[1]
    # the two collectors of the run, operator by operator (CAPTURE_NOTES.md: 5 of 5 leaf operators agree)
    assert _check_main(["check-collectors", str(db), KINETO_ID, first[1].trace_id]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["equal_ops"], out["total_ops"]) == (5, 5) and out["kernel_ns"] == [509563, 511421]
    assert ["aten::addmm", 30, 30, 289790, 291838] in out["ops"]


def test_kineto_only_run_dir_ingests_as_before(tmp_path):
    from kernelscope.storage.rundir import ingest_run, ingest_run_all
    from kernelscope.storage.store import open_store

    run = tmp_path / "r"
    shutil.copytree(NSIGHT / "encoder2_kineto", run)
    with open_store(tmp_path / "s.duckdb") as store:
        res = ingest_run_all(store, run)
        assert [(r.status, r.trace_id) for r in res] == [("ingested", KINETO_ID)]
        assert store.con.execute("SELECT key FROM labels ORDER BY key").fetchall() == [("workload",)]
        # an nsys export added later joins the same run; the stored Kineto trace gets its collector label
        (run / "x.sqlite").write_bytes(gzip.decompress((NSIGHT / "encoder2_nvtx.sqlite.gz").read_bytes()))
        main = ingest_run(store, run)
        assert main.status == "skipped" and "x.sqlite: ingested as" in main.message
        assert store.con.execute("SELECT value_text FROM labels WHERE key = 'collector' ORDER BY 1").fetchall() == [
            ("kineto",), ("nsys",)]


def test_run_dir_of_the_nsys_pass_alone(tmp_path):
    from kernelscope.storage.discovery import collect_paths
    from kernelscope.storage.rundir import ingest_run_all
    from kernelscope.storage.store import open_store

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    for f in ("run.json", "telemetry.parquet"):
        shutil.copy(NSIGHT / "encoder2_kineto" / f, run / f)
    (run / "r.sqlite").write_bytes(gzip.decompress((NSIGHT / "encoder2_nvtx.sqlite.gz").read_bytes()))
    (run / "r.nsys-rep").write_bytes(b"kept")
    assert collect_paths([tmp_path / "runs"]) == [("run", run)]  # the export and report are the run's, not files
    with open_store(tmp_path / "s.duckdb") as store:
        res = ingest_run_all(store, run)
        assert [r.status for r in res] == ["ingested"]
        row = store.con.execute("SELECT format, name, run_id IS NOT NULL FROM traces").fetchall()
        assert row == [("nsys", "nsight_twin_kineto-nsys", True)]
        assert store.con.execute("SELECT DISTINCT trace_id FROM telemetry").fetchall() == [(res[0].trace_id,)]


# ---------------------------------------------------------------- the passes with fake tools

FAKE = """#!{python}
import gzip, json, os, shutil, subprocess, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:1] == ["--version"]:
    print("NVIDIA Nsight fake version 2025.3.1.0")
    sys.exit(0)
mode = os.environ.get("FAKE_MODE", "ok")
if args[:1] == ["profile"]:
    out = args[args.index("-o") + 1]
    child = args[args.index("--force-overwrite=true") + 3:]
    child = [a for a in child if not a.startswith("--capture-range")]
    rc = subprocess.call(child)
    open(out + ".nsys-rep", "wb").write(b"report")
    sys.exit(rc)
if args[:1] == ["export"]:
    if mode == "nolibdw":
        print("QdstrmImporter: error while loading shared libraries: libdw.so.1: cannot open shared object file",
              file=sys.stderr)
        sys.exit(1)
    out = args[args.index("-o") + 1]
    open(out, "wb").write(gzip.decompress(open({sqlite!r}, "rb").read()))
    sys.exit(0)
# ncu: CSV to --log-file, the child runs with its own stdout
log_file = args[args.index("--log-file") + 1]
child = args[args.index("--metrics") + 2:]
if child[:2] == ["--profile-from-start", "off"]:
    child = child[2:]
rc = subprocess.call(child)
if mode == "perm":
    open(log_file, "w").write("==PROF== Connected\\n==ERROR== ERR_NVGPUCTRPERM - no permission to GPU counters\\n")
    sys.exit(1)
open(log_file, "wb").write(gzip.decompress(open({csv!r}, "rb").read()))
sys.exit(rc)
"""


@pytest.fixture
def fake_tool(tmp_path):
    log = tmp_path / "argv.log"
    text = FAKE.format(python=sys.executable, log=str(log), sqlite=str(NSIGHT / "encoder2_nvtx.sqlite.gz"),
                       csv=str(NSIGHT / "encoder2_ncu_dram.csv.gz"))
    return _exe(tmp_path / "bin" / "nsys", text), _exe(tmp_path / "bin" / "ncu", text), log


def test_nsys_and_ncu_passes_end_to_end_with_fake_tools(tmp_path, fake_tool, monkeypatch):
    from kernelscope.storage.rundir import ingest_run_all
    from kernelscope.storage.store import open_store

    nsys, ncu, log = fake_tool
    run = tmp_path / "run"
    shutil.copytree(NSIGHT / "encoder2_kineto", run)
    child = [sys.executable, "-c", "print('script ran')"]
    res = nsight.nsys_pass(nsys, run, "encoder2", child, capture_range=True)
    assert res.ok and res.files == ["encoder2.nsys-rep", "encoder2.sqlite"] and res.returncode == 0, res.message
    calls = [json.loads(ln) for ln in log.read_text().splitlines()]
    prof = next(c for c in calls if c[0] == "profile")
    assert prof[-3:] == child and "--capture-range=cudaProfilerApi" in prof
    export = next(c for c in calls if c[0] == "export")
    assert export[export.index("--type") + 1] == "sqlite" and export[-1] == str(run / "encoder2.nsys-rep")
    rec = json.loads((run / "run.json").read_text())
    assert rec["labels"] == {"workload": "encoder2"}  # the run's record kept, the pass added
    assert rec["nsight"]["nsys"]["ok"] and rec["nsight"]["nsys"]["argv"][-3:] == child
    assert rec["nsight"]["nsys"]["version"] == "NVIDIA Nsight fake version 2025.3.1.0"
    assert str(run / "encoder2") in rec["nsight"]["nsys"]["argv"]  # the final name, not the staging folder
    assert sorted(p.name for p in run.iterdir()) == ["encoder2.nsys-rep", "encoder2.sqlite", "run.json",
                                                     "telemetry.parquet", "trace.json.gz"]  # nothing half-written
    # ncu: kernels chosen from the stored Kineto trace, the CSV through --log-file
    db = tmp_path / "s.duckdb"
    with open_store(db) as store:
        assert ingest_run_all(store, run)[0].trace_id == KINETO_ID
    targets = nsight.ncu_targets(nsight.parse_ncu_spec("top:5"), nsight.stored_kernels(db, KINETO_ID))
    res = nsight.ncu_pass(ncu, run, "encoder2", child, targets)
    assert res.ok and res.files == ["encoder2_ncu.csv"] and "60 launches" in res.message, res.message
    ncu_call = [json.loads(ln) for ln in log.read_text().splitlines()][-1]
    assert ncu_call[ncu_call.index("--kernel-name") + 1] == "regex:" + targets.regex
    assert ncu_call[ncu_call.index("--launch-count") + 1] == str(targets.launch_count)
    rec = json.loads((run / "run.json").read_text())["nsight"]
    assert rec["ncu"]["clock_control"] == "base" and rec["ncu"]["cache_control"] == "all" and rec["nsys"]["ok"]
    with open_store(db) as store:
        parts = ingest_run_all(store, run)
        assert [r.status for r in parts] == ["skipped", "skipped", "ingested"]  # only the new CSV lands
        assert parts[2].trace_id == KINETO_ID and "matched 59/60" in parts[2].message
        note = store.con.execute("SELECT DISTINCT settings_note FROM ncu_kernels").fetchall()
    assert len(note) == 1 and "1.3-2.5x" in note[0][0]
    # failures: one line each, what was there is kept, nothing half-written
    monkeypatch.setenv("FAKE_MODE", "nolibdw")
    res = nsight.nsys_pass(nsys, run, "second", child)
    assert not res.ok and "libdw1" in res.message and "\n" not in res.message
    assert (run / "second.nsys-rep").is_file() and not (run / "second.sqlite").exists()
    monkeypatch.setenv("FAKE_MODE", "perm")
    res = nsight.ncu_pass(ncu, run, "second", child, targets)
    assert not res.ok and "ERR_NVGPUCTRPERM" in res.message and res.returncode == 1
    assert not (run / "second_ncu.csv").exists() and not [p for p in run.iterdir() if p.name.startswith(".")]
    assert json.loads((run / "run.json").read_text())["nsight"]["ncu"]["ok"] is False
    # the script failing under ncu: what ncu measured is kept, the exit code said
    monkeypatch.setenv("FAKE_MODE", "ok")
    res = nsight.ncu_pass(ncu, run, "third", [sys.executable, "-c", "raise SystemExit(3)"], targets)
    assert res.ok and res.returncode == 3 and "the script exited with 3" in res.message
    assert (run / "third_ncu.csv").is_file()


def test_nsys_pass_without_report_says_why(tmp_path):
    nsys = _exe(tmp_path / "nsys", f"#!{sys.executable}\nimport sys; sys.exit(3)\n")
    res = nsight.nsys_pass(nsys, tmp_path / "run", "x", ["true"], capture_range=True)
    assert not res.ok and "no report" in res.message and "active steps" in res.message and res.returncode == 3
    with pytest.raises(KernelscopeError) as e:
        nsight.nsys_export(nsys, tmp_path / "run" / "x.nsys-rep")
    assert "the report is kept" in _one_line(e)


# ---------------------------------------------------------------- the capture range in the child

class _FakeCuda:
    def __init__(self):
        self.calls = []
        outer = self

        class profiler:
            @staticmethod
            def start():
                outer.calls.append("start")

            @staticmethod
            def stop():
                outer.calls.append("stop")

        class nvtx:
            @staticmethod
            def range_start(name):
                outer.calls.append(name)
                return len(outer.calls)

            @staticmethod
            def range_end(rid):
                outer.calls.append(f"end {outer.calls[rid - 1]}")

        class cuda:
            pass

        cuda.profiler = profiler
        cuda.nvtx = nvtx
        cuda.synchronize = staticmethod(lambda: None)
        self.cuda = cuda


def test_capture_range_follows_the_schedule(monkeypatch):
    fake = _FakeCuda()
    monkeypatch.setattr(nsight.NvtxPass, "_cuda", lambda self: fake)
    rng = nsight.NvtxPass(True, (1, 1, 2))
    seen = []
    for _ in range(6):
        rng.step()
        seen.append(list(fake.calls))
    assert seen == [[], ["start"], ["start"], ["start", "stop"], ["start", "stop"], ["start", "stop"]]
    fake.calls.clear()
    nsight.NvtxPass(False, (0, 0, 1)).step()
    assert fake.calls == []  # no capture range: nothing
    zero = nsight.NvtxPass(True, (0, 0, 1))  # no wait, no warm-up: recording from the start
    assert fake.calls == ["start"]
    zero.step()
    assert fake.calls == ["start", "stop"]


def test_the_nsys_pass_names_its_recorded_steps_as_kineto_does(monkeypatch):
    """Mixtral's nsys pass on an H100 (schedule 1,2,3) had no step (its Kineto pass: ProfilerStep#3..#5): each
    recorded step is now an NVTX start/end range of that name, closed before the capture range stops."""
    fake = _FakeCuda()
    monkeypatch.setattr(nsight.NvtxPass, "_cuda", lambda self: fake)
    rng = nsight.NvtxPass(True, (1, 2, 3), name_steps=True)
    for _ in range(8):
        rng.step()
    assert fake.calls == ["start", "ProfilerStep#3", "end ProfilerStep#3", "ProfilerStep#4", "end ProfilerStep#4",
                          "ProfilerStep#5", "end ProfilerStep#5", "stop"]
    fake.calls.clear()
    zero = nsight.NvtxPass(True, (0, 0, 2), name_steps=True)
    zero.step()
    zero.stop()  # the script ended before its last recorded step did: the range is closed with the capture
    assert fake.calls == ["start", "ProfilerStep#0", "end ProfilerStep#0", "ProfilerStep#1", "end ProfilerStep#1",
                          "stop"]
    fake.calls.clear()
    nsight.NvtxPass(True, (0, 0, 1)).step()  # the ncu pass: no names
    assert fake.calls == ["start", "stop"]
    fake.calls.clear()

    def broken(name):
        raise RuntimeError("no NVTX")
    monkeypatch.setattr(fake.cuda.nvtx, "range_start", broken)
    rng = nsight.NvtxPass(True, (0, 0, 2), name_steps=True)  # a failing NVTX call never stops the script
    rng.step()
    rng.step()
    assert fake.calls == ["start", "stop"] and rng.name_steps is False


def test_child_nvtx_without_cuda_runs_the_script_and_says_so(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("asserts the CPU-only behaviour")
    with nsight.child_nvtx(capture_range=True, schedule=(0, 1, 1)) as rng:
        assert not torch.autograd._profiler_enabled()  # emit_nvtx needs CUDA: not entered
        x = torch.ones(4, 4)
        assert float((x @ x).sum()) == 64.0
        rng.step()
        assert rng.started and not rng.stopped
    assert rng.stopped  # a range still open is closed on exit
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "without NVTX operator ranges" in err
