"""Walk Dash component trees in tests."""

from __future__ import annotations


def find(component, comp_id):
    """The component with ``id == comp_id`` anywhere in a Dash component tree, else None."""
    if getattr(component, "id", None) == comp_id:
        return component
    children = getattr(component, "children", None)
    if children is None:
        return None
    for child in children if isinstance(children, (list, tuple)) else [children]:
        hit = find(child, comp_id)
        if hit is not None:
            return hit
    return None


def texts(component) -> str:
    """All the text of a component tree, joined by spaces."""
    if isinstance(component, (str, int, float)):
        return str(component)
    children = getattr(component, "children", None)
    if children is None:
        return ""
    return " ".join(texts(c) for c in (children if isinstance(children, (list, tuple)) else [children]))


# The same walks over a serialised tree (what /_dash-update-component returns: dicts with props).

def page_json(client, pathname: str, search: str = ""):
    """The router callback over HTTP, as the browser calls it: the page's serialised component tree."""
    import json

    body = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
            "inputs": [{"id": "url", "property": "pathname", "value": pathname}],
            "changedPropIds": ["url.pathname"], "state": [{"id": "url", "property": "search", "value": search}]}
    r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200, r.data[:500]
    return r.get_json()["response"]["page"]["children"]


def find_json(tree, comp_id):
    """A serialised component (dict) with props.id == comp_id, else None."""
    if isinstance(tree, dict):
        if tree.get("props", {}).get("id") == comp_id:
            return tree
        tree = tree.get("props", {}).get("children")
    for child in tree if isinstance(tree, list) else ([tree] if isinstance(tree, dict) else []):
        hit = find_json(child, comp_id)
        if hit is not None:
            return hit
    return None


def text_json(tree) -> str:
    """All the text of a serialised tree, joined by spaces."""
    if isinstance(tree, (str, int, float)):
        return str(tree)
    if isinstance(tree, dict):
        return text_json(tree.get("props", {}).get("children"))
    if isinstance(tree, list):
        return " ".join(text_json(c) for c in tree)
    return ""


def plotly_values(arr) -> list:
    """A Plotly JSON array as a list: a plain list, or a typed array {"dtype", "bdata" (base64)}."""
    if isinstance(arr, dict):
        import base64

        import numpy as np
        return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=arr["dtype"]).tolist()
    return list(arr)


# AG Grids (dashboard.widgets.grid): a duration column holds int ns and is shown through ksNs
# (assets/kernelscope.js), which test_browser_grid.py checks against Python's round.

def ns_columns(grid) -> dict[str, tuple[int, int]]:
    """{field: (ns per unit, decimals)} of a grid's duration columns (component or serialised dict)."""
    cols = grid["props"]["columnDefs"] if isinstance(grid, dict) else grid.columnDefs
    return {c["field"]: (c["context"]["nsPer"], c["context"]["digits"]) for c in cols
            if c.get("valueFormatter") == {"function": "ksNs(params)"}}


def shown_ms(grid, row: dict, field: str):
    """The number a duration cell shows (what ksNs computes): ns / ns-per-unit rounded, None when null."""
    per, digits = ns_columns(grid)[field]
    v = row[field]
    return None if v is None or v != v else round(v / per, digits)


def props_by_id(tree, out: dict | None = None) -> dict:
    """{component id: props} over a serialised component tree."""
    out = {} if out is None else out
    if isinstance(tree, dict):
        props = tree.get("props", {})
        if isinstance(props.get("id"), str):
            out[props["id"]] = props
        for v in props.values():
            props_by_id(v, out)
    elif isinstance(tree, list):
        for c in tree:
            props_by_id(c, out)
    return out
