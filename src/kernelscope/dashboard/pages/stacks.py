"""Call stacks of one trace (``/trace/<ref>/stacks``): flame graphs of GPU kernel time and of CPU time over the
Python frame paths recorded with ``with_stack=True`` (a kernel's time on the path active at its launch, a
backward kernel's on its forward operator's path), and the source-line table (``file.py:123 function``: GPU ms,
kernels, launches). Numbers come from the ``stacks`` analysis (docs/metrics.md "Call stacks") through
``reports/stacks.py``."""

from __future__ import annotations

from dash import html

from ...analysis import cache
from ...analysis.stacks import NO_STACKS
from ...reports import stacks as rs
from ...reports.missing import shown
from ...units import ms_text
from ..widgets import graph, grid, kpi, message, pct_text, warning_lines

TITLE = "Stacks"


def _kpis(s: dict) -> html.Div:
    k = s.get("kernel_time_ns") or 0
    return html.Div([
        kpi("stack_kernel_ns", "GPU time with a Python path", s["stack_kernel_ns"], ms_text(s["stack_kernel_ns"]),
            pct_text(s["stack_kernel_ns"], k) + " of kernel time",
            "kernels launched while a Python frame was open (backward: through the forward operator)"),
        kpi("bwd_kernel_ns", "of it backward", s["bwd_kernel_ns"], ms_text(s["bwd_kernel_ns"]), "",
            "attributed to the Python path of the forward operator (same Sequence number)"),
        kpi("python_cpu_ns", "Python CPU time", s["python_cpu_ns"], ms_text(s["python_cpu_ns"]), "",
            "summed duration of the outermost frames"),
        kpi("python_calls", "Python calls", s["python_calls"], f"{s['python_calls']:,}",
            f"{s['stacks']:,} paths, {s['frames']:,} frames"),
    ], className="ks-kpis", id="stacks-kpis")


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    body: list = [html.H2("Call stacks")]
    if not rs.has_stacks(store, trace_id):
        return html.Div(body + [message(NO_STACKS[0].upper() + NO_STACKS[1:], "msg-no-stacks")], id="stacks-page")
    r = cache.analysis(store, "stacks", trace_id)
    flame = r.tables["flame"]
    lines = rs.line_rows(r.tables["lines"], stack_kernel_ns=r.scalars.get("stack_kernel_ns"))
    trunk = rs.trunk_sentence(r.tables["lines"], r.scalars.get("stack_kernel_ns"))
    gpu = (graph("stacks-gpu-flame", rs.flame_figure(flame, "gpu_ns", "GPU kernel time by Python path "
                                                     "(callers below callees; click a box to zoom)"))
           if r.scalars.get("kernel_time_ns") else message(
               rs.NO_KERNELS[0].upper() + rs.NO_KERNELS[1:] + " The CPU time by Python path is below.",
               "msg-stacks-no-kernels"))
    body += [_kpis(r.scalars), html.P(rs.summary_sentence(r), className="ks-hint", id="stacks-sentence"), gpu,
             html.P("Colours: your code red, libraries green, torch indigo, nn.Module ranges amber, built-ins "
                    "grey.", className="ks-hint"),
             graph("stacks-cpu-flame", rs.flame_figure(flame, "cpu_ns", "CPU time by Python path")),
             html.H3("Source lines"),
             html.P("GPU time of a line: the kernels launched while it was on the stack, each once; self: launched by "
                    "it, itself or through the built-in functions it called. Built-in functions have no file."
                    + (f" {trunk}" if trunk else ""), className="ks-hint", id="stacks-lines-hint"),
             grid(lines, [("source", "source line", "text"), ("gpu_ns", "GPU (ms)", "ms"),
                          ("gpu_line_self_ns", "self GPU (ms)", "ms"), ("gpu_bwd_ns", "backward GPU (ms)", "ms"),
                          ("kernels", "kernels", "numeric"), ("launches", "launches", "numeric"),
                          ("calls", "calls", "numeric"), ("cpu_ns", "CPU (ms)", "ms")], "stacks-lines",
                  filters=True, tooltips=("source",), page_size=50)]
    body += warning_lines(r.warnings, shown)
    return html.Div(body, id="stacks-page")
