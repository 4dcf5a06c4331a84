"""Every URL parameter of the dashboard, declared once (``SPECS``) and checked in one place.

Pages and their callbacks read the query string only through :func:`url_params` (as ``urls.query``, or
``urls.url_params`` without the trace reference). It returns a :class:`Params`: a dict of the values that
passed their check (as text, the way the URL holds them), with ``problems``, one sentence per value that
did not. A refused value is left out, so the page shows its default for it, and the router puts the
sentence at the top of the page.
Typed reads (:func:`ms`, :func:`integer`) go through the same checks. Unknown parameters are dropped.

A trace reference in the path (``/trace/<ref>``) is checked with :func:`check_ref`, and any URL text a page
repeats in a sentence goes through :func:`shown` (cut to a few dozen characters, control characters
escaped), so a page never echoes a long or binary value back.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

#: Longest text value (trace reference, run id, sweep name, operator name) a URL may carry.
MAX_TEXT = 256
#: Largest |t0|, |t1| in ms (31 years: far past any trace, and epoch ns stay inside int64).
MAX_MS = 1e12
#: Largest integer id (op_id, a collective's sequence number): int64.
MAX_ID = 2**63 - 1
#: Bin counts the Bound page offers.
BIN_CHOICES = (50, 100, 200, 500, 1000, 2000)
#: The query string itself: longer ones are refused whole.
MAX_QUERY = 8192

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def shown(value, limit: int = 60) -> str:
    """``value`` as a page may quote it: repr (control characters escaped), cut to ``limit`` characters."""
    text = repr(str(value))
    return text if len(text) <= limit else text[: limit - 2] + "…" + text[0]


@dataclass(frozen=True)
class Spec:
    """One parameter: ``kind`` is 'ms' | 'int' | 'choice' | 'text' | 'id_or_name' | 'instance' | 'event'."""

    kind: str
    what: str  # words for the sentence: "the window start t0"
    lo: int = 0
    hi: int = MAX_ID
    choices: tuple = ()


SPECS: dict[str, Spec] = {
    # a trace (overview via /?trace=, compare's A and B)
    "trace": Spec("text", "the trace reference"),
    "a": Spec("text", "trace A"),
    "b": Spec("text", "trace B"),
    # Timeline and the aligned Ranks timeline: window in ms since the start, the selection
    "t0": Spec("ms", "the window start t0"),
    "t1": Spec("ms", "the window end t1"),
    "op": Spec("id_or_name", "the selected operator op"),
    "coll": Spec("instance", "the collective coll"),
    "sel": Spec("event", "the selected event sel"),
    "find": Spec("text", "the searched name find"),
    # Ranks
    "run": Spec("text", "the run"),
    "view": Spec("choice", "the view", choices=("timeline",)),
    # Operators
    "level": Spec("choice", "the operator level", choices=("leaf", "top")),
    # Bandwidth: the selected signature (row number)
    "sig": Spec("int", "the selected signature sig", lo=0, hi=10**9),
    # Modules: what the icicle's boxes are sized by
    "metric": Spec("choice", "the module metric", choices=("gpu_ns", "gpu_fwd_ns", "gpu_bwd_ns", "cpu_ns")),
    # Memory: the device whose tables are shown ('cuda:0', 'cpu'; absent: all)
    "device": Spec("text", "the memory device"),
    # Bound: bins of the queue-depth figure
    "bins": Spec("choice", "the bin count", choices=tuple(str(n) for n in BIN_CHOICES)),
    # Sweep and Compare
    "sweep": Spec("text", "the sweep"),
    "sweep_a": Spec("text", "sweep A"),
    "sweep_b": Spec("text", "sweep B"),
    "by": Spec("text", "the label to pair by"),
    "point": Spec("text", "the selected point"),
    # Steps: a user annotation used as the steps, warm-up steps per window
    "phase": Spec("text", "the step annotation phase"),
    "warmup": Spec("int", "the warm-up steps per window warmup", lo=0, hi=10**6),
}


class Params(dict):
    """Accepted URL parameters (name -> text) and ``problems``: a sentence per refused value."""

    def __init__(self, values=(), problems=()):
        super().__init__(values)
        self.problems: list[str] = list(problems)

    def sentence(self) -> str:
        """All problems as one sentence ('' when none)."""
        if not self.problems:
            return ""
        return "Ignored in the URL: " + "; ".join(self.problems) + "."


def _text_problem(value: str) -> str | None:
    if _CONTROL.search(value):
        return "holds a control character"
    if len(value) > MAX_TEXT:
        return f"is longer than {MAX_TEXT} characters"
    return None


def check(name: str, value: str) -> str | None:
    """Why ``value`` is not acceptable for parameter ``name`` (a phrase), or None when it is."""
    spec = SPECS[name]
    problem = _text_problem(value)
    if problem:
        return problem
    if spec.kind == "ms":
        try:
            x = float(value)
        except ValueError:
            return "is not a number of ms"
        if not math.isfinite(x) or abs(x) > MAX_MS:
            return f"is not a finite number of ms within ±{MAX_MS:g}"
        return None
    if spec.kind == "int":
        if not re.fullmatch(r"[0-9]{1,18}", value) or not spec.lo <= int(value) <= spec.hi:
            return f"is not a whole number from {spec.lo} to {spec.hi:,}"
        return None
    if spec.kind == "choice":
        return None if value in spec.choices else "is not one of " + ", ".join(spec.choices)
    if spec.kind == "id_or_name":  # digits: an instance id (int64); anything else: a name
        v = value.strip()
        if v.isdigit() and not (re.fullmatch(r"[0-9]{1,19}", v) and int(v) <= MAX_ID):
            return "is neither an operator instance id (a whole number below 2^63) nor a name"
        return None
    if spec.kind == "instance":  # 'pg:seq' with seq an int64
        _, sep, seq = value.rpartition(":")
        if not sep or not re.fullmatch(r"-?[0-9]{1,19}", seq) or abs(int(seq)) > MAX_ID:
            return "is not a collective instance 'group:sequence number'"
        return None
    if spec.kind == "event":  # a Timeline event 'src:id' (src: gpu, api, ann, cpu)
        if not re.fullmatch(r"(gpu|api|ann|cpu):[0-9]{1,18}", value):
            return "is not a timeline event 'gpu:id', 'api:id', 'ann:id' or 'cpu:id'"
        return None
    return None  # text: the common checks only


def check_ref(ref: str) -> str | None:
    """The sentence for a trace reference in the path that cannot name a trace, or None."""
    problem = _text_problem(ref)
    return None if problem is None else f"The trace reference in the URL {problem}."


def url_params(search: str | None) -> Params:
    """The query string's parameters (last value of a repeated one wins), each checked against ``SPECS``;
    unknown names (``token`` included) are dropped."""
    text = search if isinstance(search, str) else ""
    if len(text) > MAX_QUERY:
        too_long = f"the query string is longer than {MAX_QUERY:,} characters, so none of it was read"
        return Params(problems=[too_long])
    values: dict[str, str] = {}
    for k, v in parse_qsl(text.lstrip("?"), keep_blank_values=True):
        if k in SPECS:
            values[k] = v
    out = Params()
    for k, v in values.items():
        if v == "":
            continue  # empty means absent
        problem = check(k, v)
        if problem is None:
            out[k] = v
        else:
            out.problems.append(f"{SPECS[k].what} ({k}={shown(v, 40)}) {problem}")
    return out


def ms(params: dict, name: str) -> float | None:
    """A checked ms parameter as a float (None when absent or refused)."""
    v = params.get(name)
    return None if v is None or check(name, v) else float(v)


def integer(params: dict, name: str) -> int | None:
    """A checked whole-number parameter as an int (None when absent or refused)."""
    v = params.get(name)
    return None if v is None or check(name, v) else int(v)
