"""The one place where unit conversions live. Stored times are int64 ns since the Unix epoch.

Every factor between units has a name here (time, power, energy, bytes, FLOPs); code elsewhere divides or
multiplies by the name (``ns / NS_PER_MS``) or calls the function (``ns_to_ms(ns)``), never by a bare ``1e6``.
Bytes and FLOPs use decimal prefixes (1 MB = 10^6 bytes, 1 GB/s = 10^9 bytes per second, 1 TFLOP = 10^12).
"""

from __future__ import annotations

import json

# time
NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
US_PER_MS = 1_000
MS_PER_S = 1_000
# power and energy: NVML reports milliwatts and millijoules
MW_PER_W = 1_000
MJ_PER_J = 1_000
# bytes (decimal, as sizes print) and FLOPs
BYTES_PER_MB = 1_000_000
BYTES_PER_GB = 1_000_000_000
BYTES_PER_MIB = 1 << 20  # binary, as caches are sized
BYTES_PER_GIB = 1 << 30  # binary, as device memory is sized (an "80 GB" H100 holds 79.2 GiB)
FLOP_PER_GFLOP = 1_000_000_000
FLOP_PER_TFLOP = 1_000_000_000_000
GFLOP_PER_TFLOP = 1_000


def us_text_to_ns(text: str | bytes) -> int:
    """Exact conversion of a decimal microsecond literal (``"1700000000000000.123"``) to integer ns.

    Float64 cannot hold epoch microseconds with a fractional part exactly; decimal text can.
    Rounds half away from zero past the third fractional digit. Accepts exponents by falling back
    to Decimal.
    """
    if isinstance(text, bytes):
        text = text.decode("ascii")
    text = text.strip()
    if "e" in text or "E" in text:
        from decimal import ROUND_HALF_UP, Decimal

        return int((Decimal(text) * NS_PER_US).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    neg = text.startswith("-")
    if neg or text.startswith("+"):
        text = text[1:]
    whole, _, frac = text.partition(".")
    frac_digits = (frac + "000")[:3]
    ns = int(whole or "0") * NS_PER_US + int(frac_digits)
    if len(frac) > 3 and frac[3] >= "5":
        ns += 1
    return -ns if neg else ns


def ns_to_us(ns: int | float) -> float:
    return ns / NS_PER_US


def ns_to_ms(ns: int | float) -> float:
    return ns / NS_PER_MS


def ns_to_s(ns: int | float) -> float:
    return ns / NS_PER_S


def mw_to_w(mw: int | float) -> float:
    return mw / MW_PER_W


def mj_to_j(mj: int | float) -> float:
    return mj / MJ_PER_J


def gbps(nbytes: int | float, dur_ns: int | float) -> float | None:
    """Bytes over a duration in GB/s (1 GB = 1e9 bytes). None when the duration is not positive."""
    if not dur_ns or dur_ns <= 0:
        return None
    return nbytes / dur_ns  # bytes/ns == GB/s


def tflops(flops: int | float, dur_ns: int | float) -> float | None:
    if not dur_ns or dur_ns <= 0:
        return None
    return flops / dur_ns / GFLOP_PER_TFLOP  # flop/ns == GFLOP/s


def ms_text(ns) -> str:
    """Integer ns as milliseconds text with three decimals and the unit; '—' for missing (None/NaN)."""
    if ns is None or ns != ns:
        return "—"
    return f"{int(ns) / NS_PER_MS:,.3f} ms"


def span_text(ns) -> str:
    """A short span (a bin width) in the unit that shows it: ns below 1 µs, µs below 1 ms, else ``ms_text``
    (a 55 ns bin read "0.000 ms")."""
    if ns is None or ns != ns:
        return "—"
    if abs(ns) < NS_PER_US:
        return f"{int(ns)} ns"
    if abs(ns) < NS_PER_MS - NS_PER_US // 20:  # not "1,000.0 µs"
        return f"{ns / NS_PER_US:,.1f} µs"
    return ms_text(ns)


def clip_text(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters, its last one '…' when cut."""
    return text if len(text) <= n else text[: n - 1] + "…"


#: A tensor-list input longer than this is written by its count and its first and last shapes.
SHAPES_LIST_SHOWN = 3


def shapes_text(dims):
    """An operator's recorded input shapes (``input_dims`` JSON text) as tables and hovers show them: a tensor list
    of more than ``SHAPES_LIST_SHOWN`` tensors (a ``_foreach_`` optimizer step over every parameter writes
    hundreds) becomes ``[38 tensors: [32000, 1024], [1024], …, [32000, 1024]]``; other text is returned as it is."""
    if not isinstance(dims, str):
        return dims
    try:
        args = json.loads(dims)
    except ValueError:
        return dims
    if not isinstance(args, list) or not any(_long_list(a) for a in args):
        return dims

    def one(a):
        if not _long_list(a):
            return json.dumps(a)
        return f"[{len(a)} tensors: {json.dumps(a[0])}, {json.dumps(a[1])}, …, {json.dumps(a[-1])}]"
    return "[" + ", ".join(one(a) for a in args) + "]"


def _long_list(a) -> bool:
    return isinstance(a, list) and len(a) > SHAPES_LIST_SHOWN and all(isinstance(t, list) for t in a)
