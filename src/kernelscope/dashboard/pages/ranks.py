"""A multi-rank run (``/ranks?run=RUN``): per-rank breakdown bars (compute, exposed communication, exposed
memcpy, idle), the collective skew heat map (how long each rank waited for the last to arrive) and the
straggler table, from the ``comm`` analysis through ``reports/ranks.py``. With no ``run`` and several runs
in the store, the page lists them."""

from __future__ import annotations

from urllib.parse import urlencode

from dash import dcc, html

from ...errors import UsageError
from ...reports import ranks as rr
from .common import message, ms_text, table

TITLE = "Ranks"


def _href(run: str) -> str:
    return "/ranks?" + urlencode({"run": run})


def _run_list(runs) -> html.Div:
    items = [html.Li([html.A(r.name or r.run_id, href=_href(r.run_id), id=f"ranks-link-{r.run_id}"),
                      f" ({r.world_size} ranks, ranks from {r.rank_source}; {r.run_id})"])
             for r in runs.itertuples(index=False)]
    return html.Div([html.H2("Runs"), html.P("Pick a run of several ranks.", className="ks-hint"),
                     html.Ul(items, id="ranks-run-list")], id="ranks-page")


def layout(store, params: dict | None = None) -> html.Div:
    params = params or {}
    run = params.get("run")
    runs = rr.run_list(store)
    if runs.empty:
        return html.Div([html.H2("Ranks"), message(
            "This store has no multi-rank run. Ingest a folder holding one trace per rank: "
            "`kernelscope ingest DIR`.", "msg-no-runs")], id="ranks-page")
    if run is None and len(runs) > 1:
        return _run_list(runs)
    try:
        r = rr.comm_result(store, run)
    except UsageError as e:
        return html.Div([html.H2("Ranks"), message(f"No run to show: {e}", "msg-unknown-run", "error"),
                         html.A("← all runs", href="/ranks")], id="ranks-page")
    s = r.scalars
    name = runs.set_index("run_id").loc[s["run_id"], "name"] if s["run_id"] in set(runs.run_id) else s["run_id"]
    kpis = [("ranks", f"{s['world_size']}"), ("collectives", f"{s['collective_instances']}"),
            ("max start skew", ms_text(s["max_start_skew_ns"])),
            ("straggler", "—" if s["straggler_rank"] is None else f"rank {s['straggler_rank']}"),
            ("skew it caused", ms_text(s["straggler_skew_caused_ns"]))]
    ranks = r.tables["ranks"]
    body: list = [
        html.H2(f"Run {name}"),
        html.P(f"{s['run_id']}; clock offsets applied (ns): {r.trust['clock_offsets_applied']}", className="ks-hint"),
        html.Div([html.Div([html.Div(k, className="ks-kpi-label"), html.Div(v, className="ks-kpi-value")],
                           className="ks-kpi", id=f"ranks-kpi-{i}") for i, (k, v) in enumerate(kpis)],
                 className="ks-kpis"),
        html.H3("Where each rank's GPU time went"),
        dcc.Graph(id="ranks-breakdown", figure=rr.breakdown_figure(ranks), config={"displaylogo": False}),
        html.H3("Collective skew: time each rank waited for the last to arrive"),
        dcc.Graph(id="ranks-skew", figure=rr.skew_heatmap(r.tables["arrivals"]), config={"displaylogo": False}),
        html.H3("Stragglers: collectives by start skew"),
    ]
    st = rr.straggler_table(r.tables["collectives"])
    body.append(table(st, [(c, c, "text" if c in ("instance", "collective") else "numeric") for c in st.columns],
                      "ranks-straggler-table"))
    per = ranks[["rank", "name", "compute_ns", "comm_ns", "exposed_comm_ns", "overlap_pct", "comm_only_ns",
                 "exposed_memcpy_ns", "idle_ns", "gpu_span_ns"]].copy()
    body += [html.H3("Per rank (ns)"),
             table(per, [(c, c, "text" if c == "name" else "numeric") for c in per.columns], "ranks-table")]
    body += [html.P("⚠ " + w, className="ks-warning") for w in r.warnings]
    return html.Div(body, id="ranks-page")
