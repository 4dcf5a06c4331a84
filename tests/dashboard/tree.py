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
