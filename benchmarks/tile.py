"""Build a large Kineto trace by tiling a real sample trace along time.

Tile k (k = 0 .. n-1) is a copy of the sample's events with

* every timestamp shifted by ``k * period`` where ``period = span + gap``
  (``span`` = last event end - first event start of the sample, in ns;
  ``gap`` = 1 ms), computed exactly in integer nanoseconds;
* every id that must stay unique shifted by ``k * stride`` where
  ``stride = max(id in sample) + 1``: ``External id``, ``correlation`` (and the
  ``ac2g`` flow ids, which equal it), ``Ev Idx`` / ``Profiler Event Index``,
  ``Sequence number``, ``Python id`` / ``Python parent id`` and the ``id`` of
  every other flow category (``fwdbwd`` ...);
* ``ProfilerStep#N`` renumbered to ``N + k * steps`` so steps stay distinct.

Events that describe the whole capture appear once: metadata (``ph == "M"``),
the ``Trace`` span (its ``dur`` stretched to cover all tiles) and global
instant events (``ph == "i"`` with a string pid; one stamped at the sample's
last timestamp is moved to the end of the last tile).  Every top-level key of
the sample is kept in place (before or after ``traceEvents``), including
``baseTimeNanoseconds`` and ``deviceProperties``; ``distributedInfo``
``{"rank": 0, "world_size": 1}`` is added when missing, because HTA otherwise
re-reads the whole file looking for a rank.

The output keeps Kineto's layout (one event per few lines, ``"key": value``),
so it has about the sample's bytes per event.  Usage::

    python benchmarks/tile.py SAMPLE OUT.json --mb 250 [--gz]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import time
from decimal import Decimal

GAP_NS = 1_000_000
ID_ARGS = (
    "External id",
    "correlation",
    "Ev Idx",
    "Profiler Event Index",
    "Sequence number",
    "Python id",
    "Python parent id",
)
STEP_RE = re.compile(r"^(ProfilerStep#)(\d+)$")
CORRELATION_FLOWS = ("ac2g", "async_cpu_to_gpu", "async")


def load_sample(path: str) -> dict:
    """Load a Kineto trace (.json or .json.gz) keeping number text exact (floats as Decimal)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return json.loads(fh.read(), parse_float=Decimal)


def _ns(value) -> int:
    """Kineto microseconds (int or Decimal) -> integer ns, exact."""
    return int(Decimal(value) * 1000)


def _is_once(ev: dict) -> bool:
    """True for events that describe the whole capture and must not repeat per tile."""
    if ev.get("ph") == "M" or ev.get("cat") == "Trace":
        return True
    return ev.get("ph") == "i" and isinstance(ev.get("pid"), str)


def _scalar(v) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, int):
        return str(v)
    return json.dumps(v, ensure_ascii=False, default=str)


def _value(v) -> str:
    """Compact JSON of a value with Decimal kept as written."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return _scalar(v)


class _Var:
    """A placeholder in the tile template: value = fmt(base + k * step)."""

    __slots__ = ("base", "step", "fmt")

    def __init__(self, base: int, step: int, fmt):
        self.base, self.step, self.fmt = base, step, fmt


def _pct(s: str) -> str:
    return s.replace("%", "%%")


class Tiler:
    """Holds a sample trace and writes n time-shifted copies of its events."""

    def __init__(self, sample: dict):
        if not isinstance(sample, dict) or not isinstance(sample.get("traceEvents"), list):
            raise ValueError("sample is not a Kineto trace: no traceEvents list")
        keys = list(sample)
        cut = keys.index("traceEvents")
        self.head = [(k, sample[k]) for k in keys[:cut]]
        self.tail = [(k, sample[k]) for k in keys[cut + 1:]]
        if "distributedInfo" not in sample:
            self.head.append(("distributedInfo", {"rank": 0, "world_size": 1}))
        events = sample["traceEvents"]
        self.once = [e for e in events if _is_once(e)]
        self.tiled = [e for e in events if not _is_once(e)]
        if not self.tiled:
            raise ValueError("sample has no events to tile")
        ts_all = [e["ts"] for e in events if "ts" in e]
        self.int_us = all(isinstance(t, int) for t in ts_all)
        starts = [_ns(e["ts"]) for e in self.tiled]
        ends = [_ns(e["ts"]) + _ns(e.get("dur", 0)) for e in self.tiled]
        self.t0, self.t1 = min(starts), max(ends)
        self.last_ts = max(_ns(t) for t in ts_all)
        self.period = self.t1 - self.t0 + GAP_NS
        if self.int_us:
            self.period = -(-self.period // 1000) * 1000
        self.strides = self._strides()
        self.template, self.vars = self._template()

    def _strides(self) -> dict:
        mx: dict = {}

        def see(key, v):
            if isinstance(v, int) and not isinstance(v, bool):
                mx[key] = max(mx.get(key, 0), v)

        steps = 0
        for e in self.tiled:
            args = e.get("args") or {}
            for k in ID_ARGS:
                see(k, args.get(k))
            if e.get("ph") in ("s", "f", "t") and "id" in e:
                cat = e.get("cat")
                see("correlation" if cat in CORRELATION_FLOWS else "flow:" + str(cat), e["id"])
            m = STEP_RE.match(str(e.get("name", "")))
            if m:
                steps = max(steps, int(m.group(2)) + 1)
        strides = {k: v + 1 for k, v in mx.items()}
        strides["step"] = steps
        return strides

    def _fmt_ts(self, ns: int) -> str:
        if self.int_us:
            return str(ns // 1000)
        q, r = divmod(ns, 1000)
        return f"{q}.{r:03d}"

    def _event_parts(self, e: dict) -> list:
        """Kineto-style text of one event as a list of str and _Var."""
        ident = str
        top, args = [], None
        flow_key = None
        if e.get("ph") in ("s", "f", "t") and "id" in e:
            cat = e.get("cat")
            flow_key = "correlation" if cat in CORRELATION_FLOWS else "flow:" + str(cat)
        for k, v in e.items():
            if k == "args":
                args = v
                continue
            if k == "ts":
                val = _Var(_ns(v), self.period, self._fmt_ts)
            elif k == "id" and flow_key and isinstance(v, int):
                val = _Var(v, self.strides.get(flow_key, 0), ident)
            elif k == "name" and STEP_RE.match(str(v)):
                m = STEP_RE.match(v)
                val = _Var(int(m.group(2)), self.strides["step"],
                           lambda n, p=m.group(1): json.dumps(p + str(n)))
            else:
                val = _value(v)
            top.append((k, val))
        parts = ["  {\n    "]
        for i, (k, val) in enumerate(top):
            parts.append((", " if i else "") + _scalar(k) + ": ")
            parts.append(val)
        if args is not None:
            parts.append(",\n    \"args\": {\n      ")
            for i, (k, v) in enumerate(args.items()):
                parts.append((", " if i else "") + _scalar(k) + ": ")
                if k in ID_ARGS and isinstance(v, int) and not isinstance(v, bool):
                    parts.append(_Var(v, self.strides.get(k, 0), ident))
                else:
                    parts.append(_value(v))
            parts.append("\n    }")
        parts.append("\n  }")
        return parts

    def _template(self):
        """One %-format string for a whole tile plus its placeholders, in order."""
        text, variables = [], []
        for e in self.tiled:
            for p in self._event_parts(e):
                if isinstance(p, _Var):
                    text.append("%s")
                    variables.append(p)
                else:
                    text.append(_pct(p))
            text.append(",\n")
        return "".join(text), variables

    def tile_text(self, k: int) -> str:
        """The events of tile k, each followed by ',\\n'."""
        return self.template % tuple(v.fmt(v.base + k * v.step) for v in self.vars)

    def once_text(self, n: int) -> str:
        """The once-only events, stretched to cover n tiles (no trailing comma)."""
        out = []
        shift = (n - 1) * self.period
        for e in self.once:
            e = dict(e)
            if e.get("cat") == "Trace" and "dur" in e:
                e["dur"] = _to_us(_ns(e["dur"]) + shift, self.int_us)
            if e.get("ph") == "i" and "ts" in e and _ns(e["ts"]) == self.last_ts:
                e["ts"] = _to_us(_ns(e["ts"]) + shift, self.int_us)
            out.append("  " + _value(e))
        return ",\n".join(out)

    def tile_bytes(self) -> int:
        return len(self.tile_text(0).encode())

    def write(self, path: str, n: int, progress=None) -> dict:
        """Write n tiles to path (.json); returns counts of what was written."""
        tmp = path + ".part"
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write("{\n")
            for k, v in self.head:
                fh.write(f"  {_scalar(k)}: {_value(v)},\n")
            fh.write('  "traceEvents": [\n')
            once = self.once_text(n)
            for k in range(n):
                text = self.tile_text(k)
                if k == n - 1 and not once:
                    text = text[:-2] + "\n"
                fh.write(text)
                if progress and (k % 200 == 0 or k == n - 1):
                    progress(k + 1, n)
            fh.write(once + "\n  ]")
            for k, v in self.tail:
                fh.write(f",\n  {_scalar(k)}: {_value(v)}")
            fh.write("\n}\n")
        os.replace(tmp, path)
        return self.counts(n)

    def counts(self, n: int) -> dict:
        """Event counts of an n-tile file, by what a loader keeps."""
        x = sum(1 for e in self.tiled if e.get("ph") == "X")
        x_once = sum(1 for e in self.once if e.get("ph") == "X")
        hta = sum(1 for e in self.tiled if "dur" in e and "cat" in e and e["cat"] != "Trace")
        kernels = sum(1 for e in self.tiled if e.get("cat") in ("kernel", "Kernel"))
        return {
            "tiles": n,
            "events": n * len(self.tiled) + len(self.once),
            "complete_events": n * x + x_once,
            "hta_events": n * hta,
            "kernels": n * kernels,
        }


def _to_us(ns: int, int_us: bool):
    if int_us:
        return ns // 1000
    q, r = divmod(ns, 1000)
    return Decimal(f"{q}.{r:03d}")


def gzip_file(src: str, dst: str, level: int = 6) -> None:
    """Stream-compress src into dst."""
    tmp = dst + ".part"
    with open(src, "rb") as fi, gzip.open(tmp, "wb", compresslevel=level) as fo:
        while True:
            buf = fi.read(1 << 22)
            if not buf:
                break
            fo.write(buf)
    os.replace(tmp, dst)


def tiles_for(tiler: Tiler, megabytes: float) -> int:
    """Number of tiles so that the file has at least `megabytes` MiB."""
    target = int(megabytes * 1024 * 1024)
    return max(1, -(-target // tiler.tile_bytes()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sample")
    ap.add_argument("out", help="output .json path")
    ap.add_argument("--mb", type=float, default=250.0, help="minimum size in MiB")
    ap.add_argument("--gz", action="store_true", help="also write OUT.gz")
    a = ap.parse_args(argv)
    t = time.perf_counter()
    tiler = Tiler(load_sample(a.sample))
    n = tiles_for(tiler, a.mb)
    info = tiler.write(a.out, n)
    if a.gz:
        gzip_file(a.out, a.out + ".gz")
    info["bytes"] = os.path.getsize(a.out)
    info["seconds"] = round(time.perf_counter() - t, 1)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
