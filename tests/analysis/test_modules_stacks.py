"""The modules and stacks analyses (docs/metrics.md "Modules", "Call stacks") on real with_modules/with_stack
captures, against tests/reference_modules.py: a plain-Python attribution over the raw JSON that nests frames by
the profiler's own Python ids and maps backward operators through its fwdbwd flows (the store does neither).

- Every module instance path: forward and rolled-up backward kernel time, kernels, calls and CPU time equal the
  reference to the ns; the top module's GPU time is the kernel time it covers (the reference's kernels inside
  any module) and with the kernels outside every module adds up to the trace's kernel time; 2 decoder layers in
  the 2-layer model, 6 in the 6-layer captures (the lead's issue-13 samples).
- Every source line: GPU time (inclusive, self, backward), kernels, launches, calls and CPU time equal the
  reference; the flame graph's roots hold every kernel with a stack.
- The CLI's ``analyze modules|stacks TRACE --json``; traces without module ranges / frames say how to record them.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import SAMPLES
from reference_modules import reference

from kernelscope.analysis.modules import modules
from kernelscope.analysis.stacks import stacks
from kernelscope.cli import cli
from kernelscope.storage.store import open_store

FULL = SAMPLES / "qwen2_train_full" / "trace.json.gz"
TB = SAMPLES / "tb_qwen2" / "vm_484.1795772162647993554.pt.trace.json.gz"  # 2 steps, 6 layers
CASES = [(FULL, 2), (SAMPLES / "qwen2_train_mem" / "trace.json.gz", 6), (TB, 6)]


def _results(session_store, path):
    with open_store(session_store.db, read_only=True) as store:
        tid = session_store.ids[path]
        return modules(store, tid), stacks(store, tid)


@pytest.fixture(scope="module")
def computed(session_store):
    return {p: (_results(session_store, p), reference(str(p))) for p, _ in CASES}


@pytest.mark.parametrize(("path", "layers"), CASES, ids=lambda c: getattr(c, "parent", c).__str__()[-20:])
def test_module_tree_equals_the_raw_json(computed, path, layers):
    (m, _s), ref = computed[path]
    tree = m.tables["tree"]
    want = {p: (r["gpu_fwd_ns"], r["gpu_bwd_ns"], r["kernels"], r["calls"], r["cpu_ns"])
            for p, r in ref["modules"].items()}
    got = {r.path: (r.gpu_fwd_ns, r.gpu_bwd_ns, r.kernels, r.calls, r.cpu_ns) for r in tree.itertuples()}
    assert got == want
    assert (tree["gpu_ns"] == tree["gpu_fwd_ns"] + tree["gpu_bwd_ns"]).all()
    top = tree[tree["depth"] == 0].set_index("module")
    s = m.scalars
    assert top.loc[s["top_module"], "gpu_ns"] == ref["module_kernel_ns"] == s["module_kernel_ns"]
    assert top.loc[s["top_module"], "gpu_bwd_ns"] > 0  # backward kernels rolled up into the model
    assert s["kernel_time_ns"] == ref["kernel_time_ns"]
    assert s["module_kernel_ns"] + s["outside_kernel_ns"] + m.trust["no_launch_kernel_ns"] == s["kernel_time_ns"]
    assert m.tables["outside"]["gpu_ns"].sum() == s["outside_kernel_ns"]
    classes = m.tables["classes"].set_index("class")
    assert classes.loc["Qwen2DecoderLayer", "instances"] == layers
    assert sorted(tree.loc[tree["class"] == "Qwen2DecoderLayer", "module"]) == \
        [f"Qwen2DecoderLayer_{i}" for i in range(layers)]
    inst = m.tables["instances"].set_index("module")
    assert inst["gpu_ns"].sum() >= s["module_kernel_ns"]  # nested instances count their children again
    assert inst.loc[s["top_module"], "gpu_self_ns"] + tree[tree["depth"] > 0]["gpu_self_ns"].sum() == \
        s["module_kernel_ns"]  # every kernel in a module has exactly one innermost module


@pytest.mark.parametrize("path", [FULL, TB], ids=["full", "tb"])
def test_source_lines_equal_the_raw_json(computed, path):
    (_m, st), ref = computed[path]
    lines = st.tables["lines"]
    cols = ["gpu_ns", "gpu_self_ns", "gpu_line_self_ns", "gpu_bwd_ns", "kernels", "launches", "calls", "cpu_ns"]
    want = {n: tuple(r[c] for c in cols) for n, r in ref["lines"].items() if not n.startswith("nn.Module: ")}
    got = {r.frame: tuple(getattr(r, c) for c in cols) for r in lines.itertuples()}
    assert got == want
    assert st.scalars["stack_kernel_ns"] == ref["stack_kernel_ns"]
    flame = st.tables["flame"]
    roots = flame[flame["parent_stack_id"].isna()]
    assert roots["gpu_ns"].sum() == flame["gpu_self_ns"].sum() == ref["stack_kernel_ns"]
    one = lines[lines["file"].notna()].iloc[0]
    assert one["frame"] == f"{one['file']}({one['line']}): {one['function']}"


def test_cli_json(session_store):
    runner = CliRunner()
    tid = session_store.ids[FULL]
    for name, keys in (("modules", ("module_kernel_ns", "tree", "classes")), ("stacks", ("stack_kernel_ns", "lines"))):
        res = runner.invoke(cli, ["analyze", name, tid, "--json", "--db", str(session_store.db)])
        assert res.exit_code == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["analysis"] == name and all(k in doc for k in keys)
    assert doc["stack_kernel_ns"] == reference(str(FULL))["stack_kernel_ns"]


def test_traces_without_modules_or_stacks_say_how_to_record_them(session_store):
    """torch.profiler's defaults record neither nn.Module ranges nor Python frames."""
    with open_store(session_store.db, read_only=True) as store:
        tid = session_store.ids[SAMPLES / "qwen2_train_default" / "trace.json.gz"]
        m, s = modules(store, tid), stacks(store, tid)
    assert m.scalars["module_calls"] == 0 and m.tables["tree"].empty
    assert m.warnings == [m.warnings[0]] and "with_modules=True" in m.warnings[0]
    assert s.scalars["python_calls"] == 0 and s.tables["lines"].empty and "with_stack=True" in s.warnings[0]
    assert m.scalars["outside_kernel_ns"] == m.scalars["kernel_time_ns"] > 0


def test_the_reports_source_lines_show_self_gpu_time(computed, session_store):
    """The report's source-line table is sorted by GPU time launched under a line, so the call chain of the
    training loop led it (capture_wild.py's <module>, main, step ... all 1.049 ms on qwen2_train_full; ten frames
    of runpy and kernelscope's runner above Mixtral's script) and the lines that launched (torch/nn/modules/
    linear.py:130 forward) sat lower; its self column, the reference's self time, says which lines made the
    calls, and the trunk is left out."""
    from kernelscope.reports.report import build

    (_m, _st), ref = computed[FULL]
    with open_store(session_store.db, read_only=True) as store:
        (section,) = [s for s in build(store, [session_store.ids[FULL]], figures=False) if s.anchor == "stacks"]
    (table,) = [b for b in section.blocks if hasattr(b, "df")]
    df = table.df.set_index("source")
    by_frame = {f"{f.split('(')[0]}:{f.split('(')[1].split(')')[0]} {f.split(': ', 1)[1]}": v
                for f, v in ref["lines"].items() if not f.startswith("nn.Module: ") and "(" in f}
    for source, row in df.iterrows():
        want = by_frame[source]
        assert row["self GPU ms"] == want["gpu_line_self_ns"] / 1e6 and row["GPU ms"] == want["gpu_ns"] / 1e6, source
    assert df["self GPU ms"].max() > 0
    # self counts what a line launched through the built-ins it called: F.linear's kernels are linear.py's line's
    assert df.loc["torch/nn/modules/linear.py:130 forward", "self GPU ms"] > 0 == by_frame[
        "torch/nn/modules/linear.py:130 forward"]["gpu_self_ns"]
    # the trunk (<module>, main, ...: every kernel launched under them, none by them) ranks nothing: left out of
    # the table and named in a sentence (the reference's lines with all the stack kernel time and no self time)
    total = ref["stack_kernel_ns"]
    trunk = {src for src, v in by_frame.items() if v["gpu_ns"] == total and v["gpu_line_self_ns"] == 0}
    assert any(src.endswith("<module>") for src in trunk) and not trunk & set(df.index)
    (said,) = [b for b in section.blocks if isinstance(b, str) and "left out of the table" in b]
    assert said.startswith(f"{len(trunk):,} lines ") and "left out of the table, from capture_wild.py:252 <module> to " in said


def test_a_compiled_model_says_why_it_has_no_inner_modules(computed):
    """torch.compile'd ViT-B/16 on an H100 (--modules): the tree held OptimizedModule_0 over
    ViTForImageClassification_0 and nothing below it, with no word why. The wrapped module's self GPU time is named;
    an eager trace (every sample) says nothing; a compiled layer inside an eager model is named too."""
    import pandas as pd

    from kernelscope.analysis.modules import compiled_note

    def tree(rows):
        return pd.DataFrame(rows, columns=["path", "parent_path", "module", "class", "gpu_self_ns"])

    vit = tree([("OptimizedModule_0", None, "OptimizedModule_0", "OptimizedModule", 0),
                ("OptimizedModule_0/ViTForImageClassification_0", "OptimizedModule_0", "ViTForImageClassification_0",
                 "ViTForImageClassification", 96_124_406)])
    assert compiled_note(vit) == (
        "torch.compile ran ViTForImageClassification_0: the modules inside a compiled module run as its compiled "
        "graphs and record no module ranges (only what runs outside them, at graph breaks, does), so 96.124 ms of GPU "
        "time is the compiled module's self time; profile the model without torch.compile for time per inner module.")
    layers = tree([("M_0", None, "M_0", "M", 5),
                   *[(f"M_0/OptimizedModule_{i}", "M_0", f"OptimizedModule_{i}", "OptimizedModule", 0) for i in range(4)],
                   *[(f"M_0/OptimizedModule_{i}/Block_{i}", f"M_0/OptimizedModule_{i}", f"Block_{i}", "Block",
                      1_000_000) for i in range(4)]])
    assert compiled_note(layers).startswith("torch.compile ran Block_0, Block_1, Block_2 and 1 more: ")
    assert "so 4.000 ms of GPU time" in compiled_note(layers)
    for path, _layers in CASES:
        (m, _s), _ref = computed[path]
        assert len(m.tables["tree"]) > 2 and not [w for w in m.warnings if "torch.compile" in w]
