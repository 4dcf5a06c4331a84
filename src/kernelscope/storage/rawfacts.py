"""What a staged trace holds, read before anything is derived from it (TEMP VIEWs ``ks_raw_in``/``ks_raw`` over the
staged events, storage/staging.py): the checks that refuse it, the facts the trust section reports (stored in
``traces``, schema 008) and the sentences ingest says about them, its time span and its telemetry clock offset.
"""

from __future__ import annotations

import re

from ..errors import ParseError
from .derive import GPU_KINDS_SQL, LAUNCH_KINDS_SQL


def check_correlations(con, source: str) -> None:
    """Refuse a trace whose host runtime/driver calls repeat a correlation id (merged traces)."""
    rows = con.execute(
        f"""SELECT correlation, count(*) FROM ks_raw
            WHERE kind IN {LAUNCH_KINDS_SQL} AND correlation IS NOT NULL
            GROUP BY correlation HAVING count(*) > 1 ORDER BY correlation LIMIT 3"""
    ).fetchall()
    if rows:
        n = con.execute(
            f"""SELECT count(*) FROM (SELECT correlation FROM ks_raw
                WHERE kind IN {LAUNCH_KINDS_SQL} AND correlation IS NOT NULL
                GROUP BY correlation HAVING count(*) > 1)"""
        ).fetchall()[0][0]
        ids = ", ".join(str(r[0]) for r in rows)
        raise ParseError(
            f"{source}: {n} correlation ids (e.g. {ids}) appear on more than one runtime/driver call; "
            "the file looks like several traces merged into one: ingest each process's trace separately"
        )


_CLOCK_RE = re.compile(r"^kernelscope::clock_sync\s+(-?\d+)\s*$")


def clock_offset(con, base: int) -> tuple[int | None, str | None]:
    """Telemetry clock minus trace clock from the first ``kernelscope::clock_sync <epoch_ns>`` marker."""
    row = con.execute(
        """SELECT name, ts_ns FROM ks_raw
           WHERE kind IN ('annotation', 'cpu_op') AND name LIKE 'kernelscope::clock_sync%'
             AND ts_ns IS NOT NULL
           ORDER BY ts_ns, seq LIMIT 1"""
    ).fetchall()
    row = row[0] if row else None
    if row is None:
        return None, None
    m = _CLOCK_RE.match(row[0])
    if not m:
        return None, f"clock marker {row[0]!r} has no integer epoch ns; clock offset not set"
    return int(m.group(1)) - (int(row[1]) + int(base)), None


def trace_span(con, base: int) -> tuple[int | None, int | None]:
    row = con.execute(
        """SELECT min(ts_ns), max(ts_ns + coalesce(dur_ns, 0)) FROM ks_raw
           WHERE kind NOT IN ('meta', 'flow') AND ts_ns IS NOT NULL"""
    ).fetchall()[0]
    if row[0] is None:
        return None, None
    return int(row[0]) + base, int(row[1]) + base


#: Categories set aside (kind 'other') that are the profiler's own records, not trace content: the
#: "Trace" span and overhead records (Kineto ``overhead``, nsys ``nsys_overhead``). Not counted as set aside.
PROFILER_OWN_CATEGORIES_RE = r"(?i)^(trace|.*overhead)$"
#: Categories of other accelerators' device events and of device ranges (Kineto's MTIA, XPU, HPU, Glow and
#: PrivateUse1 activity types, the CUDA profiler range): their events are device events wherever they lie.
ACCELERATOR_CATEGORIES_RE = r"(?i)^(mtia|xpu|hpu|tpu|npu|mps|glow|privateuse1)_|^cuda_profiler_range$|^hpu_op$"
#: process_labels text of a device process (Kineto labels a device's pid "GPU 0", "MTIA 0", ...).
DEVICE_LABEL_RE = r"(?i)\b(gpu|mtia|xpu|hpu|tpu|npu|accelerator|device)\b"


def raw_facts(con, meta=None) -> dict:
    """What the staged trace (``raw_view``) holds that the trust section reports, counted before any is
    derived (storage keeps them in ``traces``, schema 008):

    - ``negative_durations``: per kind, ``count``, ``min_ns`` and ``sum_ns`` of the events whose duration is
      negative as written (kernels with end < start, ...); each is stored as 0 ns;
    - ``set_aside``: per category that no kind maps (Kineto's ``mtia_*``, ``cuda_profiler_range``, any
      unknown ``cat``; the profiler's own "Trace" and overhead records left out), ``events`` and
      ``device_events``: those on a device (``args.device``, a process Kineto labels as a device, or the
      process of the trace's GPU activities) or of an accelerator category (``ACCELERATOR_CATEGORIES_RE``).
      They stay in other_events, never analysed;
    - ``truncated``: the parser's note of a cut file read with ``--salvage`` (``TraceMeta.truncated``), else
      None.
    """
    neg = {
        kind: {"count": int(n), "min_ns": int(lo), "sum_ns": int(total)}
        for kind, n, lo, total in con.execute(
            """SELECT kind, count(*), min(dur_ns), sum(dur_ns)::BIGINT FROM ks_raw_in
               WHERE dur_ns < 0 GROUP BY kind ORDER BY kind"""
        ).fetchall()
    }
    aside = {
        cat: {"events": int(n), "device_events": int(d)}
        for cat, n, d in con.execute(
            f"""WITH dev_pids AS (
                    SELECT DISTINCT pid FROM ks_raw_in
                    WHERE kind = 'meta' AND name = 'process_labels' AND pid IS NOT NULL
                      AND regexp_matches(coalesce(text, ''), '{DEVICE_LABEL_RE}')
                    UNION SELECT DISTINCT pid FROM ks_raw_in WHERE kind IN {GPU_KINDS_SQL} AND pid IS NOT NULL
                )
                SELECT coalesce(cat, '(none)') AS c, count(*),
                       count(*) FILTER (WHERE device IS NOT NULL
                                          OR regexp_matches(coalesce(cat, ''), '{ACCELERATOR_CATEGORIES_RE}')
                                          OR pid IN (SELECT pid FROM dev_pids))
                FROM ks_raw_in
                WHERE kind = 'other' AND NOT regexp_matches(coalesce(cat, ''), '{PROFILER_OWN_CATEGORIES_RE}')
                GROUP BY 1 ORDER BY 1"""
        ).fetchall()
    }
    return {"negative_durations": neg, "set_aside": aside,
            "truncated": getattr(meta, "truncated", None) if meta is not None else None}


def _n(x: int) -> str:
    return f"{x:,}"


def facts_warnings(facts: dict, meta=None) -> list[str]:
    """The trace's stored warnings for ``raw_facts`` (one counted sentence each)."""
    out = []
    cut = facts.get("truncated")
    if cut:
        out.append(
            f"truncated trace: the file ends at byte {_n(cut['read_bytes'])} of its "
            f"{'decompressed ' if cut.get('gzip') else ''}text ({cut['reason']}); ingest --salvage kept the "
            f"{_n(cut['events_kept'])} complete events before byte {_n(cut['at_byte'])}: what the profiler wrote "
            "after the cut (events, and keys written after them) is lost, so counts and spans are low")
        if cut.get("base_time_lost"):
            out.append("truncated trace: baseTimeNanoseconds (written after the events) was lost with the cut; "
                       "times are stored as written, relative to an unknown base")
    neg = facts.get("negative_durations") or {}
    if neg:
        parts = ", ".join(f"{v['count']} {k}" for k, v in neg.items())
        worst = min(v["min_ns"] for v in neg.values())
        out.append(f"{sum(v['count'] for v in neg.values())} events with a negative duration ({parts}; "
                   f"down to {_n(worst)} ns) stored as 0 ns")
    aside = facts.get("set_aside") or {}
    if aside:
        parts = ", ".join(f"{k} {_n(v['events'])}" + (f" ({_n(v['device_events'])} on a device)"
                                                      if v["device_events"] else "") for k, v in aside.items())
        out.append(f"{_n(sum(v['events'] for v in aside.values()))} events of categories kernelscope does not "
                   f"analyse were set aside (kept in other_events): {parts}")
    return out


def facts_notes(facts: dict) -> list[str]:
    """Short notes for the ingest line (what the trust section will say)."""
    out = []
    cut = facts.get("truncated")
    if cut:
        out.append(f"TRUNCATED at byte {_n(cut['read_bytes'])}: kept {_n(cut['events_kept'])} complete events")
    neg = facts.get("negative_durations") or {}
    if neg:
        out.append(f"{sum(v['count'] for v in neg.values())} negative durations stored as 0")
    aside = facts.get("set_aside") or {}
    if aside:
        dev = sum(v["device_events"] for v in aside.values())
        out.append(f"{_n(sum(v['events'] for v in aside.values()))} events of unmapped categories set aside ("
                   + ", ".join(aside) + ")" + (f", {_n(dev)} of them device events" if dev else ""))
    return out


def untimed_count(con) -> int:
    """Events of timed kinds that came without a timestamp (kept in other_events)."""
    return con.execute(
        """SELECT count(*) FROM ks_raw WHERE ts_ns IS NULL AND kind IN
           ('cpu_op', 'annotation', 'gpu_annotation', 'python', 'runtime', 'driver',
            'kernel', 'memcpy', 'memset')"""
    ).fetchall()[0][0]
