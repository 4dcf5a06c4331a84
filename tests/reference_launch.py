"""Independent reference for the launch split (api + queue + dispatch = lq) and the TKLQT terms.

Reads the raw stored rows (``gpu_activities`` and ``launches``, a plain SELECT each) and computes every number
in pandas from the definitions of docs/metrics.md "Launch overhead"; shares no SQL or code with
``kernelscope.analysis.launch`` or ``kernelscope.storage.derive``:

- activity k with launch call L: ``lq = start(k) - start(L)``; ``api = min(dur(L), lq)``;
  ``ready`` = end of the activity just before k on its (device, stream), ordered by (start, activity_id)
  (the end of L when k is the stream's first); ``queue = clamp(ready - end(L), 0, lq - api)``;
  ``dispatch = lq - api - queue``; ``launch_delay = max(0, start(k) - end(L))``;
- a TKLQT term: a kernel not launched by a graph, or the first node (by start, then activity_id) of each
  graph launch.

``splits(store, trace_id)`` gives one row per activity with a launch call, indexed by ``activity_id``, with
columns lq_ns, api_ns, queue_ns, dispatch_ns, launch_delay_ns, term; ``totals(split)`` the sums over the
terms (tklqt_ns, api_ns, queue_ns, dispatch_ns, launch_delay_ns).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

COLUMNS = ["lq_ns", "api_ns", "queue_ns", "dispatch_ns", "launch_delay_ns", "term"]


def splits(store, trace_id: str) -> pd.DataFrame:
    acts = store.query("SELECT activity_id, kind, device, stream, start_ns, end_ns, is_graph, launch_id "
                       "FROM gpu_activities WHERE trace_id = $t", {"t": trace_id})
    calls = store.query("SELECT launch_id, start_ns AS l_start, dur_ns AS l_dur, end_ns AS l_end "
                        "FROM launches WHERE trace_id = $t", {"t": trace_id})
    acts = acts.sort_values(["start_ns", "activity_id"], kind="stable").reset_index(drop=True)
    # the previous activity on the same (device, stream), every activity counted (with a launch call or not)
    key = acts["device"].astype("string").fillna("<null>") + "/" + acts["stream"].astype("string").fillna("<null>")
    acts["prev_end"] = acts["end_ns"].astype("Int64").groupby(key, sort=False).shift()  # exact: no float
    # a graph launch's first node: the earliest (start, activity_id) activity of a launch with a graph activity
    graph_launches = set(acts.loc[acts["is_graph"].astype(bool), "launch_id"].dropna().astype(np.int64))
    in_graph = acts[acts["launch_id"].isin(graph_launches)]
    first_nodes = set(in_graph.groupby("launch_id", sort=False)["activity_id"].first().astype(np.int64))

    a = acts[acts["launch_id"].notna()].merge(calls, on="launch_id", how="inner")
    start, l_start, l_dur, l_end = (a[c].to_numpy(np.int64) for c in ("start_ns", "l_start", "l_dur", "l_end"))
    ready = a["prev_end"].fillna(pd.Series(l_end, index=a.index)).to_numpy(np.int64)
    lq = start - l_start
    api = np.minimum(l_dur, lq)
    queue = np.maximum(0, np.minimum(ready - l_end, lq - api))
    out = pd.DataFrame({
        "activity_id": a["activity_id"].to_numpy(np.int64),
        "lq_ns": lq, "api_ns": api, "queue_ns": queue, "dispatch_ns": lq - api - queue,
        "launch_delay_ns": np.maximum(0, start - l_end),
        "term": (a["kind"] == "kernel").to_numpy()
        & (~a["is_graph"].astype(bool).to_numpy() | a["activity_id"].isin(first_nodes).to_numpy()),
    })
    return out.set_index("activity_id").sort_index()


def totals(split: pd.DataFrame) -> dict[str, int]:
    terms = split[split["term"]]
    return {"tklqt_ns": int(terms["lq_ns"].sum()), "api_ns": int(terms["api_ns"].sum()),
            "queue_ns": int(terms["queue_ns"].sum()), "dispatch_ns": int(terms["dispatch_ns"].sum()),
            "launch_delay_ns": int(terms["launch_delay_ns"].sum())}


def distribution(split: pd.DataFrame) -> dict[str, tuple[int, ...]]:
    """Per metric over the TKLQT terms: (count, median, p90, p99, max), each quantile the nearest rank: the
    ceil(n * p / 100)-th smallest of the n values (a full sort)."""
    terms = split[split["term"]]
    out = {}
    for m in ("lq_ns", "api_ns", "queue_ns", "dispatch_ns", "launch_delay_ns"):
        v = sorted(int(x) for x in terms[m])
        if v:
            out[m] = (len(terms), *(v[max(1, math.ceil(len(v) * p / 100)) - 1] for p in (50, 90, 99)), v[-1])
    return out


def assert_matches(got: pd.DataFrame, want: pd.DataFrame, what) -> None:
    """``got`` (rows with activity_id and the COLUMNS) equals the reference ``want``, row by row."""
    g = got.set_index("activity_id")[COLUMNS].sort_index()
    assert list(g.index) == list(want.index), (what, "activities differ")
    differs = (g.to_numpy(np.int64) != want[COLUMNS].to_numpy(np.int64)).any(axis=1)
    bad = [(i, tuple(g.loc[i]), tuple(want.loc[i])) for i in want.index[differs][:5]]
    assert not bad, (what, f"{int(differs.sum())} activities differ", bad)
