"""A real mouse click where Plotly drew something, for the browser tests.

``click_drawn(page, graph, locate, arg)``: ``locate`` is a JavaScript function (of ``arg``) that returns the page
position of the thing to click ({x, y} or [x, y]), computed from the figure's layout. On a loaded machine a
figure's first draw can be followed by a redraw that moves what it drew (CI once clicked where a sweep marker had
been and the page never changed), so the pointer is moved there first, the click waits until Plotly reports a hover
on the figure (``graph``: a selector inside which the Plotly div is found) and the position has stayed put, and
only then the mouse clicks: a real pointer event, as a user's.
"""

from __future__ import annotations

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # pragma: no cover - the page fixture skips the browser tests then
    PlaywrightTimeout = None

_HOVERED = """(sel) => { const gd = document.querySelector(sel);
  return !!(gd && gd._hoverdata && gd._hoverdata.length); }"""


def _xy(pos) -> tuple[float, float]:
    return (pos["x"], pos["y"]) if isinstance(pos, dict) else (pos[0], pos[1])


def click_drawn(page, graph: str, locate: str, arg=None, tries: int = 10, until: str | None = None,
                until_arg=None, clicks: int = 3):
    """Click at ``locate(arg)`` once a hover is reported there and it stays put; returns what ``locate`` gave.

    ``until``: a JavaScript predicate (of ``until_arg``, or of what ``locate`` gave when that is None) that the
    click must make true. When it is still false 20 s after a click, the figure is located and clicked again,
    ``clicks`` times at most: a click that Plotly took for the end of a redraw (a full suite run on a loaded
    2-core machine once waited 120 s for the URL after one) is retried as a user would, and a click that never
    works still fails."""
    for attempt in range(clicks if until else 1):
        pos = _hover_then_click(page, graph, locate, arg, tries)
        if until is None:
            return pos
        done_arg = pos if until_arg is None else until_arg
        try:
            page.wait_for_function(until, arg=done_arg, timeout=20_000 if attempt < clicks - 1 else 60_000)
            return pos
        except PlaywrightTimeout:
            if attempt == clicks - 1:
                raise
            if page.evaluate(until, done_arg):  # it came just after the wait: no second click
                return pos
    raise ValueError(f"clicks={clicks}: give at least one click")  # the last click returns or raises


def _hover_then_click(page, graph: str, locate: str, arg, tries: int):
    pos = None
    for _ in range(tries):
        pos = page.evaluate(locate, arg)
        assert pos is not None, "nothing drawn to click"
        x, y = _xy(pos)
        page.mouse.move(x + 1, y)
        page.mouse.move(x, y)
        try:
            page.wait_for_function(_HOVERED, arg=f"{graph} .js-plotly-plot", timeout=3000)
        except PlaywrightTimeout:
            continue
        if page.evaluate(locate, arg) == pos:
            break
    page.mouse.click(*_xy(pos))
    return pos
