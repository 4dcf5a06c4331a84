"""Interval algebra in SQL: the one definition of the union of ``[start, end)`` intervals, and busy time per bin.

Every query that merges intervals (a device's busy time, steps merged into islands, an operator instance's
GPU time, a thread's host-wait gaps) takes its SQL from here, so the rule is written once:

    Order the intervals of a group by (start, end). An interval starts a new *island* when its start lies
    after the largest end of every earlier interval of the group (``start > prev_end``; intervals that
    only touch, ``start == prev_end``, join the same island). An island runs from its first start to its
    largest end; the union's length is the sum of the islands' lengths.

:func:`union_sql` returns the islands; :func:`union_length_sql` returns only the length, summed interval by
interval (each adds ``greatest(0, end - greatest(start, prev_end))``: the part after every earlier end), which
is cheaper than grouping when the islands themselves are not needed. Over intervals with ``end >= start``
both give the same length, in exact integer ns, whatever the order of ties.

The functions return SQL text (not a DuckDB macro): the grouping keys vary by caller, and text needs nothing
set up on a connection (read-only, cursor and user-SQL connections alike). ``src`` is a table, view or CTE
name, or a parenthesised SELECT; ``by`` names its grouping columns (none: one group); the names are the
caller's own identifiers, never user input.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _cols(by: Sequence[str]) -> str:
    return "".join(f"{c}, " for c in by)


def _prev_end_sql(src: str, by: Sequence[str], start: str, end: str) -> str:
    """``src``'s intervals with ``_prev_end``: the largest end of the earlier intervals of their group."""
    part = f"PARTITION BY {', '.join(by)} " if by else ""
    return (f"SELECT {_cols(by)}{start}, {end}, max({end}) OVER ({part}ORDER BY {start}, {end} "
            f"ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _prev_end FROM {src}")


def union_sql(src: str, by: Sequence[str] = (), start: str = "start_ns", end: str = "end_ns") -> str:
    """SQL of the union of ``src``'s intervals per group ``by``: one row per island, columns ``by``,
    ``start`` (the island's first start) and ``end`` (its largest end), in no particular order."""
    part = f"PARTITION BY {', '.join(by)} " if by else ""
    return f"""SELECT {_cols(by)}min({start}) AS {start}, max({end}) AS {end} FROM (
  SELECT *, sum(CASE WHEN _prev_end IS NULL OR {start} > _prev_end THEN 1 ELSE 0 END)
              OVER ({part}ORDER BY {start}, {end} ROWS UNBOUNDED PRECEDING) AS _island
  FROM ({_prev_end_sql(src, by, start, end)}))
GROUP BY {_cols(by)}_island"""


def union_length_sql(src: str, by: Sequence[str] = (), start: str = "start_ns", end: str = "end_ns",
                     name: str = "union_ns") -> str:
    """SQL of the length of the union of ``src``'s intervals per group ``by``: columns ``by`` and ``name``
    (HUGEINT ns; one row per group with intervals, or one row, null when none, without ``by``)."""
    group = f" GROUP BY {', '.join(by)}" if by else ""
    return (f"SELECT {_cols(by)}sum(greatest(0, {end} - greatest({start}, coalesce(_prev_end, {start})))) "
            f"AS {name} FROM ({_prev_end_sql(src, by, start, end)}){group}")


def busy_bins_sql(src: str, keys: Sequence[str] = ("src", "k1", "k2", "k3")) -> str:
    """SQL of the busy ns per (``keys``, bin) of ``src``'s intervals (columns ``keys``, ``start_ns``,
    ``end_ns``) in the window ``[$a, $b)``, bins of ``$w`` ns from ``$a``: each interval is clipped to the
    window; those inside one bin (most) are summed per bin at once, the others split over the bins they touch
    (generate_series); the sum per bin is capped at the bin's length (``busy_ns``, exact integer ns).
    Sparse: bins without busy time are absent. Intervals are summed, not merged: overlapping ones may add
    up to more than their union inside a bin, never to more than the bin."""
    k = _cols(keys)
    return f"""
WITH j AS (
  SELECT {k}s, e, (s - $a) // $w AS b0, (e - 1 - $a) // $w AS b1
  FROM (SELECT {k}greatest(start_ns, $a) AS s, least(end_ns, $b) AS e
        FROM ({src}) q WHERE start_ns < $b AND end_ns > $a AND end_ns > start_ns)
), one AS (
  SELECT {k}b0 AS bin, sum(e - s) AS d FROM j WHERE b0 = b1 GROUP BY ALL
), many AS (
  SELECT {k}bin, sum(least(e, $a + (bin + 1) * $w) - greatest(s, $a + bin * $w)) AS d
  FROM (SELECT {k}s, e, unnest(generate_series(b0, b1)) AS bin FROM j WHERE b1 > b0)
  GROUP BY ALL
)
SELECT {k}bin, CAST(least(sum(d), $w) AS BIGINT) AS busy_ns
FROM (SELECT * FROM one UNION ALL SELECT * FROM many) GROUP BY ALL
"""


def islands(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[s, e)`` (int64 arrays) as islands in start order, by ``union_sql``'s rule: in
    (start, end) order an interval opens a new island when it starts after every earlier end; an island runs
    from its first start to its largest end."""
    if not len(s):
        return s, e
    order = np.lexsort((e, s))
    s, e = s[order], e[order]
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > np.maximum.accumulate(e)[:-1]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)


def covered_before(starts: np.ndarray, ends: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """For disjoint intervals in start order (``islands``' output): their length before each time in ``xs``
    (the intervals' total length in ``(-inf, x)``), so ``[a, b)`` overlaps them by
    ``covered_before(b) - covered_before(a)``."""
    if not len(starts):
        return np.zeros(len(xs), dtype=np.int64)
    before = np.concatenate(([0], np.cumsum(ends - starts)[:-1])).astype(np.int64)
    k = np.searchsorted(starts, xs, side="right") - 1  # the interval starting last at or before x
    kk = np.maximum(k, 0)
    return np.where(k >= 0, before[kk] + np.minimum(xs, ends[kk]) - starts[kk], 0).astype(np.int64)
