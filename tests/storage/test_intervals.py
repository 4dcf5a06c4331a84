"""storage/intervals.py: the one interval-union definition and the busy-per-bin SQL, checked against a plain
Python computation over random intervals (ties, touching and nested intervals, several groups)."""

from __future__ import annotations

import random

import duckdb
import pytest

from kernelscope.storage.intervals import busy_bins_sql, union_length_sql, union_sql


def _islands(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merged intervals by a sort and a sweep: touching intervals join one island."""
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _rows(seed: int, n: int = 400) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        g = rng.randrange(3)
        s = rng.randrange(0, 5000)
        e = s + rng.choice([0, 1, rng.randrange(1, 60), rng.randrange(1, 600)])
        rows.append((g, s, e))
    rows += [(0, 100, 200), (0, 200, 300), (0, 100, 200), (1, 7000, 7000)]  # touching, duplicate, empty
    return rows


@pytest.fixture(params=[1, 2, 3])
def con(request):
    c = duckdb.connect()
    c.execute("CREATE TABLE iv (g INTEGER, start_ns BIGINT, end_ns BIGINT)")
    c.executemany("INSERT INTO iv VALUES (?, ?, ?)", _rows(request.param))
    yield c
    c.close()


def _by_group(con) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for g, s, e in con.execute("SELECT g, start_ns, end_ns FROM iv").fetchall():
        out.setdefault(g, []).append((s, e))
    return out


def test_union_is_the_merged_islands_per_group(con):
    got = sorted(con.execute(union_sql("iv", by=("g",))).fetchall())
    want = sorted((g, s, e) for g, iv in _by_group(con).items() for s, e in _islands(iv))
    assert got == want


def test_union_without_groups_and_with_other_column_names(con):
    sql = union_sql("(SELECT start_ns AS a, end_ns AS b FROM iv)", start="a", end="b")
    got = sorted(con.execute(sql).fetchall())
    assert got == _islands([iv for ivs in _by_group(con).values() for iv in ivs])


def test_union_length_equals_the_islands_length(con):
    got = dict(con.execute(union_length_sql("iv", by=("g",))).fetchall())
    want = {g: sum(e - s for s, e in _islands(iv)) for g, iv in _by_group(con).items()}
    assert got == want
    (total,) = con.execute(union_length_sql("iv", name="n")).fetchone()
    assert total == sum(e - s for s, e in _islands([iv for ivs in _by_group(con).values() for iv in ivs]))


def test_union_length_of_nothing_is_null():
    c = duckdb.connect()
    c.execute("CREATE TABLE iv (start_ns BIGINT, end_ns BIGINT)")
    assert c.execute(union_length_sql("iv")).fetchall() == [(None,)]
    assert c.execute(union_sql("iv")).fetchall() == []


def test_busy_bins_are_the_summed_overlaps_capped_at_the_bin(con):
    a, b, w = 950, 4130, 97
    src = "SELECT 'x' AS src, g AS k1, 0 AS k2, 0 AS k3, start_ns, end_ns FROM iv"
    got = {(k1, b_): n for _, k1, _, _, b_, n in con.execute(busy_bins_sql(src), {"a": a, "b": b, "w": w}).fetchall()}
    want: dict[tuple[int, int], int] = {}
    for g, iv in _by_group(con).items():
        for i in range(-(-(b - a) // w)):
            lo, hi = a + i * w, min(a + (i + 1) * w, b)
            d = sum(max(0, min(e, hi) - max(s, lo)) for s, e in iv if e > s)
            if d:
                want[(g, i)] = min(d, w)
    assert got == want
