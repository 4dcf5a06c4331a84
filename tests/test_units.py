"""units.py is the one place unit factors live: its conversions are exact where they must be, and no other module
multiplies or divides by a bare 1e3/1e6/1e9/1e12 (or their inverses): a scan of src/ finds none beyond the listed
non-units, so a new one fails here with its file and line."""

from __future__ import annotations

import ast
import json
import sys

import pytest
from conftest import ROOT

from kernelscope import units

PACKAGE = ROOT / "src" / "kernelscope"
FACTORS = {1e3, 1e6, 1e9, 1e12, 1e-3, 1e-6, 1e-9, 1e-12}

# (file under src/kernelscope, a fragment of the line): bare factors that are not unit conversions.
NOT_UNITS = {
    ("collectors/nvml_devices.py", "v // 1000"),  # CUDA driver version 12040 -> "12.4"
}


@pytest.mark.parametrize("text, ns", [
    ("1700000000000000.123", 1_700_000_000_000_000_123),
    ("1.0005", 1001),  # half rounds away from zero past the third decimal
    ("-1.0005", -1001),
    ("2.5e3", 2_500_000),
    ("7", 7000),
    (b"0.001", 1),
])
def test_us_text_to_ns_is_exact(text, ns):
    assert units.us_text_to_ns(text) == ns


def test_factors_agree_with_each_other():
    assert units.NS_PER_MS == units.NS_PER_US * units.US_PER_MS
    assert units.NS_PER_S == units.NS_PER_MS * units.MS_PER_S
    assert units.FLOP_PER_TFLOP == units.FLOP_PER_GFLOP * units.GFLOP_PER_TFLOP
    assert units.BYTES_PER_GB == 1000 * units.BYTES_PER_MB and units.BYTES_PER_MIB == 1024 * 1024
    assert units.ns_to_ms(2_500_000) == 2.5 and units.ns_to_s(units.NS_PER_S) == 1.0
    assert units.mw_to_w(1500) == 1.5 and units.mj_to_j(250) == 0.25
    assert units.gbps(2_000, 1_000) == 2.0 and units.gbps(1, 0) is None
    assert units.tflops(3_000_000, 1_000) == 3.0 and units.tflops(1, -1) is None
    assert units.ms_text(1_234_567) == "1.235 ms" and units.ms_text(None) == "—" and units.ms_text(float("nan")) == "—"


def _bare_factors():
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "units.py":
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.Mult, ast.FloorDiv))):
                continue
            for side in (node.left, node.right):
                value = side.value if isinstance(side, ast.Constant) else None
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value in FACTORS:
                    found.add((path.relative_to(PACKAGE).as_posix(), node.lineno, lines[node.lineno - 1].strip()))
    return found


def test_no_bare_unit_factor_outside_units_py():
    allowed = NOT_UNITS
    bad = sorted(f"src/kernelscope/{f}:{n}: {line}" for f, n, line in _bare_factors()
                 if not any(f == af and frag in line for af, frag in allowed))
    assert not bad, "use a name from kernelscope/units.py instead of a bare factor:\n" + "\n".join(bad)


def test_the_scan_finds_a_bare_factor(tmp_path, monkeypatch):
    """The guard is not vacuous: a module dividing ns by 1e6 is found."""
    pkg = tmp_path / "kernelscope"
    pkg.mkdir()
    (pkg / "units.py").write_text("NS_PER_MS = 1_000_000\n")
    (pkg / "m.py").write_text("def ms(ns):\n    return ns / 1e6\n\n\ndef ok(ns):\n    return ns / 7\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    assert _bare_factors() == {("m.py", 2, "return ns / 1e6")}


def test_span_text_shows_a_short_span_in_a_unit_that_shows_it():
    """The Bound page and report said "bins of 0.000 ms" of a 11 µs GPU span (TraceLens' sglang decode capture)."""
    from kernelscope.units import span_text

    assert [span_text(v) for v in (55, 999, 1_000, 43_300, 999_949, 999_999, 1_000_000, 433_000_000, None)] == [
        "55 ns", "999 ns", "1.0 µs", "43.3 µs", "999.9 µs", "1.000 ms", "1.000 ms", "433.000 ms", "—"]


def test_shapes_text_shortens_long_tensor_lists_only():
    """Mixtral's AdamW step: each _foreach_ operator's shapes were 1,500-4,500 characters in the report's table
    (39 parameter shapes per tensor list); a list of more than three tensors is now its count, first two, last."""
    from kernelscope.units import shapes_text

    params = [[32000, 1024], [1024]] + [[8, 1024, 2048]] * 36 + [[32000, 1024]]
    dims = json.dumps([params, params, []])
    assert shapes_text(dims) == ("[[39 tensors: [32000, 1024], [1024], …, [32000, 1024]], "
                                 "[39 tensors: [32000, 1024], [1024], …, [32000, 1024]], []]")
    # ordinary inputs and short lists are left as written (spacing too); so is text that is not JSON
    for kept in ("[[8,16],[16,4]]", "[[[1, 2], [3], [4]], [5]]", "[[8192, 4096], [8, 4096, 1024], [8], [], []]",
                 "not json", "[]"):
        assert shapes_text(kept) == kept
    assert shapes_text(None) is None
