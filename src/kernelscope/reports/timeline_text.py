"""The Timeline's words: the hover of each drawn event, the labels drawn inside bars wide enough for them, and
the fields of the selected event's details panel. DataFrames and dicts in (``storage.timeline``'s events,
event_details and event_detail), text out; no SQL, no figures.

**Hover** (one text per event): the name, where (thread and depth, stream), start (ms since the trace's first
event) and duration, then per source: a GPU activity's grid and block, correlation id, launching operator
(its leaf operator, with the top-level one when different) and that operator's input shapes; a CPU operator's
input shapes; a CUDA API call's correlation id and the GPU activities it launched.

**Labels**: an event gets its name written inside its bar when at least ``MIN_CHARS`` characters fit in the
bar's visible width at the current zoom (``CHAR_PX`` pixels per character of the 10 px font, ``PAD_PX`` of
padding); a name longer than the room is cut with an ellipsis. Kernel names are shortened first (no
``void``, no template or argument list, no namespaces). At most ``LABEL_LIMIT`` labels (the widest bars) per figure.
"""

from __future__ import annotations

import html
import json

import numpy as np
import pandas as pd

from ..units import NS_PER_MS, NS_PER_US, clip_text, shapes_text

#: Plot-area width in px assumed when the browser has not said (the figure's first render).
DEFAULT_PX = 1100
CHAR_PX = 6.2
PAD_PX = 6.0
MIN_CHARS = 4
LABEL_LIMIT = 800
#: Longest name and shapes text in a hover (characters).
HOVER_NAME = 110
HOVER_SHAPES = 100


def duration(ns) -> str:
    """A duration in words: µs below 1 ms (3 decimals), else ms."""
    ns = int(ns)
    if abs(ns) >= NS_PER_MS:
        return f"{ns / NS_PER_MS:,.3f} ms"
    return f"{ns / NS_PER_US:,.3f} µs"


def at_ms(ns, origin: int) -> str:
    """A time as ms since ``origin`` (6 decimals: exact to the ns)."""
    return f"{(int(ns) - int(origin)) / NS_PER_MS:,.6f} ms"


def _cut(text, n: int) -> str:
    text = "" if text is None or (not isinstance(text, str) and pd.isna(text)) else str(text)
    return clip_text(text, n)


def _esc(text, n: int) -> str:
    return html.escape(_cut(text, n), quote=False)


def dims3(x, y, z) -> str:
    """Grid or block dimensions as '[x, y, z]' ('' when unknown)."""
    if any(v is None or pd.isna(v) for v in (x, y, z)):
        return ""
    return f"[{int(x)}, {int(y)}, {int(z)}]"


def short_name(name: str) -> str:
    """A kernel or operator name as a label shows it: a C++ kernel signature loses 'void ', its template and
    argument lists and its namespaces ('void at::native::elementwise_kernel<128, 4, ...>(...)' ->
    'elementwise_kernel'); an operator name ('aten::mm') stays whole."""
    s = str(name or "").strip()
    cpp = s.startswith("void ")
    if cpp:
        s = s[5:]
    for stop in ("<", "("):
        i = s.find(stop)
        if i >= 3:
            s, cpp = s[:i], True
    if cpp and "::" in s:
        s = s.rsplit("::", 1)[1] or s
    return s.strip()


def hover_texts(ev: pd.DataFrame, details: dict | None, lane_labels: list, origin: int) -> list[str]:
    """The hover text of each row of ``ev`` (rows of ``storage.timeline.events``, with column ``lane``), in
    its order; ``details`` from ``storage.timeline.event_details`` (None: name, place and time only);
    ``lane_labels`` the y-axis texts by lane."""
    out = [""] * len(ev)
    if ev.empty:
        return out
    pos = np.arange(len(ev))
    srcs = ev["src"].to_numpy()
    for src in pd.unique(srcs):
        m = srcs == src
        cols = {c: ev[c].to_numpy()[m] for c in ("name", "start_ns", "end_ns", "lane", "detail", "k3", "id")}
        det = details.get(src) if details is not None else None
        full = det is not None and not det.empty
        if full:  # the details' row of each event by id (-1: none)
            at = pd.Index(det["id"].to_numpy()).get_indexer(cols["id"])
            for c in det.columns.drop(["src", "id"]):
                v = det[c].to_numpy(dtype=object)
                cols[c] = np.where(at >= 0, v[np.maximum(at, 0)], None) if len(v) else np.full(len(at), None)
        for i, text in zip(pos[m], _hover_src(src, cols, full, lane_labels, origin)):
            out[i] = text
    return out


def _hover_src(src: str, d: dict, full: bool, lane_labels: list, origin: int):
    """The hover texts of the events of one source (``d``: column -> array, as :func:`hover_texts` joins
    them)."""
    names = [f"<b>{_esc(n, HOVER_NAME)}</b><br>" for n in d["name"]]
    start = (d["start_ns"].astype(np.int64) - int(origin)) / NS_PER_MS
    dur = d["end_ns"].astype(np.int64) - d["start_ns"].astype(np.int64)
    when = [f"start {t:,.6f} ms · {duration(n)}" for t, n in zip(start, dur)]
    where = [lane_labels[int(i)] for i in d["lane"]]
    if src == "gpu":
        head = [f"{n}{k} on {w}<br>{t}" for n, k, w, t in zip(names, d["detail"], where, when)]
        if not full:
            return head
        grid = [_grid_block(*v) for v in zip(d["grid_x"], d["grid_y"], d["grid_z"], d["block_x"], d["block_y"],
                                               d["block_z"])]
        corr = [f"correlation {_int(c)}" for c in d["correlation"]]
        ops = [_launched_by(o, t) for o, t in zip(d["op_name"], d["top_name"])]
        shapes = ["shapes " + _esc(_shapes(x), HOVER_SHAPES) for x in d["op_dims"]]
        return ["<br>".join(v) for v in zip(head, grid, corr, ops, shapes)]
    if src == "cpu":
        head = [f"{n}operator on {w.rsplit(' d', 1)[0]} (depth {int(k)})<br>{t}"
                for n, w, k, t in zip(names, where, d["k3"], when)]
        return head if not full else [f"{h}<br>shapes {_esc(_shapes(x), HOVER_SHAPES)}"
                                      for h, x in zip(head, d["op_dims"])]
    if src == "api":
        head = [f"{n}CUDA API call on {w.removesuffix(' CUDA API')}<br>{t}" for n, w, t in zip(names, where, when)]
        return head if not full else [f"{h}<br>correlation {_int(c)} · {_int(k)} GPU activities"
                                      for h, c, k in zip(head, d["correlation"], d["activities"])]
    return [f"{n}{w}<br>{t}" for n, w, t in zip(names, where, when)]


def _grid_block(gx, gy, gz, bx, by, bz) -> str:
    grid, block = dims3(gx, gy, gz), dims3(bx, by, bz)
    return f"grid {grid or '?'} · block {block or '?'}"


def _launched_by(op, top) -> str:
    op = _cut(op, 60) if isinstance(op, str) else None
    top = _cut(top, 60) if isinstance(top, str) else None
    return "launched by " + (html.escape(op) if op else "no operator") + (
        f" in {html.escape(top)}" if top and top != op else "")


def _int(v) -> str:
    return "?" if v is None or pd.isna(v) else str(int(v))


def _shapes(dims) -> str:
    """input_dims JSON text as written ('[]' entries, scalars, kept; long tensor lists shortened by
    ``units.shapes_text``); 'not recorded' when absent."""
    if dims is None or (not isinstance(dims, str) and pd.isna(dims)) or dims == "":
        return "not recorded"
    return shapes_text(str(dims))


def labels(ev: pd.DataFrame, a: int, b: int, origin: int, plot_px: float) -> pd.DataFrame:
    """The labels to draw in the bars of ``ev`` (rows of ``storage.timeline.events`` with ``lane``) in the window
    ``[a, b)`` drawn ``plot_px`` pixels wide: x (ms since ``origin``: where the text starts, ``PAD_PX / 2``
    into the bar's visible part), lane, text, src; at most ``LABEL_LIMIT`` (the widest)."""
    if ev.empty or b <= a:
        return pd.DataFrame(columns=["x", "lane", "text", "src"])
    s = np.maximum(ev["start_ns"].to_numpy(dtype=np.int64), a)
    e = np.minimum(ev["end_ns"].to_numpy(dtype=np.int64), b)
    px = (e - s).astype(np.float64) * (float(plot_px) / (b - a))
    chars = np.floor((px - PAD_PX) / CHAR_PX).astype(np.int64)
    ok = np.nonzero(chars >= MIN_CHARS)[0]
    if len(ok) > LABEL_LIMIT:
        ok = ok[np.argsort(-px[ok], kind="stable")[:LABEL_LIMIT]]
    texts = []
    for name, n in zip(ev["name"].to_numpy()[ok], chars[ok]):
        t = short_name(name)
        texts.append(clip_text(t, n))
    # left-aligned a few px into the visible part (WebGL text centres long strings off their anchor)
    left = (s[ok] - int(origin)) / NS_PER_MS + (PAD_PX / 2) * ((b - a) / float(plot_px)) / NS_PER_MS
    return pd.DataFrame({"x": left, "lane": ev["lane"].to_numpy()[ok], "text": texts,
                         "src": ev["src"].to_numpy()[ok]})


def detail_rows(d: dict, origin: int, lane_label: str,
                kernels: pd.DataFrame | None = None) -> list[tuple[str, str, str]]:
    """The details panel of a selected event (``storage.timeline.event_detail``) as (field id, label, value)
    rows; ``kernels`` (the selection's GPU activities, ``storage.timeline.selection``) adds their count and
    summed time for a CPU operator or a CUDA API call."""
    src = d["src"]
    rows = [("name", "name", str(d["name"])), ("start", "start", at_ms(d["start_ns"], origin)),
            ("duration", "duration", duration(d["end_ns"] - d["start_ns"]))]
    if src == "gpu":
        rows += [("kind", "kind", "NCCL kernel" if d.get("collective") else d["kind"]),
                 ("stream", "stream", lane_label), ("grid", "grid", dims3(d["grid_x"], d["grid_y"], d["grid_z"])),
                 ("block", "block", dims3(d["block_x"], d["block_y"], d["block_z"])),
                 ("correlation", "correlation id", _int(d["correlation"])),
                 ("operator", "launching operator", d["op_name"] or "none (no operator encloses the launch)"),
                 ("top", "top-level operator", d["top_name"] or ""),
                 ("shapes", "shapes (operator inputs)", _shapes(d["op_dims"])),
                 ("launch", "launch call", f"{d['launch_name']} at {at_ms(d['launch_start_ns'], origin)}"
                  if d["launch_name"] else "not linked"),
                 ("queued", "launch → start", duration(d["start_ns"] - d["launch_start_ns"])
                  if d["launch_start_ns"] is not None else ""),
                 ("registers", "registers per thread", _int(d["registers_per_thread"])),
                 ("shared", "shared memory (bytes)", _int(d["shared_memory_bytes"]))]
        if d.get("collective"):
            rows.append(("collective", "collective", str(d["collective"])))
    elif src == "cpu":
        rows += [("thread", "thread", lane_label.rsplit(" d", 1)[0]), ("depth", "depth", _int(d["depth"])),
                 ("shapes", "shapes (input dims)", _shapes(d["op_dims"])),
                 ("types", "input types", _shapes(d["op_types"])),
                 ("parent", "parent operator", d["parent_name"] or ""),
                 ("top", "top-level operator", d["top_name"] or "itself"), ("op_id", "operator id", str(d["id"]))]
    elif src == "api":
        rows += [("thread", "thread", lane_label.removesuffix(" CUDA API")),
                 ("correlation", "correlation id", _int(d["correlation"])),
                 ("launch_type", "launch type", str(d["launch_type"] or "")),
                 ("operator", "calling operator", d["op_name"] or "none"),
                 ("shapes", "shapes (operator inputs)", _shapes(d["op_dims"]))]
    else:
        rows += [("kind", "kind", str(d["kind"])), ("step", "step", _int(d["step"]) if d["step"] is not None else "")]
    if kernels is not None and src in ("cpu", "api"):
        n = len(kernels)
        busy = int((kernels["end_ns"] - kernels["start_ns"]).sum()) if n else 0
        rows.append(("kernels", "GPU activities launched", f"{n:,} ({duration(busy)} on the GPU)"))
    return [(k, label, v if isinstance(v, str) else json.dumps(v)) for k, label, v in rows if v != ""]
