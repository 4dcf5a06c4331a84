"""Independent reference for the comm analysis on real rank traces: stdlib only, reading the raw Kineto JSON.

Per rank (one device each): interval unions by sorting, set differences as differences of union lengths
(|C \\ K| = |C u K| - |K|), which is a different method from the analysis' single boundary sweep in SQL.
Collective instances: per process group, the k-th NCCL kernel in start order on each rank.

    python tests/reference_comm.py sample_traces/ddp2/ddp_rank0/trace.json.gz sample_traces/ddp2/ddp_rank1/trace.json.gz
"""

from __future__ import annotations

import gzip
import json
import sys
from decimal import Decimal


def _ns(text) -> int:
    return int((Decimal(text) * 1000).to_integral_value())


def load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return json.loads(fh.read(), parse_float=Decimal)


def union_len(intervals) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def rank_numbers(doc: dict) -> dict:
    base = int(doc.get("baseTimeNanoseconds") or 0)
    K, C, M, coll = [], [], [], []
    for e in doc["traceEvents"]:
        cat = e.get("cat")
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset") or e.get("ph") != "X":
            continue
        s = base + _ns(e["ts"])
        iv = (s, s + _ns(e["dur"]))
        args = e.get("args") or {}
        if cat != "kernel":
            M.append(iv)
        elif "Collective name" in args or e["name"].startswith("nccl"):
            C.append(iv)
            n = max(int(args.get("In msg nelems", 0)), int(args.get("Out msg nelems", 0)))
            coll.append({"pg": args.get("Process Group Name"), "start": iv[0], "end": iv[1],
                         "bytes": n * {"Float": 4, "BFloat16": 2, "Half": 2}.get(args.get("dtype"), 0)})
        else:
            K.append(iv)
    K, C, M = [iv for iv in K if iv[1] > iv[0]], [iv for iv in C if iv[1] > iv[0]], [iv for iv in M if iv[1] > iv[0]]
    allv = K + C + M
    out = {
        "compute_ns": union_len(K),
        "comm_ns": union_len(C),
        "exposed_comm_ns": union_len(C + K) - union_len(K),
        "comm_only_ns": union_len(allv) - union_len(K + M),
        "memcpy_ns": union_len(M),
        "exposed_memcpy_ns": union_len(allv) - union_len(K + C),
        "busy_ns": union_len(allv),
        "gpu_span_ns": max(e for _, e in allv) - min(s for s, _ in allv),
    }
    out["idle_ns"] = out["gpu_span_ns"] - out["busy_ns"]
    out["overlap_pct"] = 100.0 * (out["comm_ns"] - out["exposed_comm_ns"]) / out["comm_ns"] if out["comm_ns"] else None
    seq: dict = {}
    for c in sorted(coll, key=lambda c: c["start"]):
        c["seq"] = seq.setdefault(c["pg"], 0)
        seq[c["pg"]] += 1
    out["collectives"] = coll
    return out


def instances(per_rank: list[dict]) -> list[dict]:
    """Per (pg, seq): start/end skew, straggler (last start; ties lowest rank), bytes, time."""
    groups: dict = {}
    for rank, nums in enumerate(per_rank):
        for c in nums["collectives"]:
            groups.setdefault((c["pg"], c["seq"]), []).append((rank, c))
    out = []
    for (pg, seq), items in sorted(groups.items(), key=lambda kv: min(c["start"] for _, c in kv[1])):
        last_start = max(c["start"] for _, c in items)
        straggler = min(r for r, c in items if c["start"] == last_start)
        out.append({
            "pg": pg, "seq": seq, "ranks": len(items), "straggler_rank": straggler,
            "start_skew_ns": last_start - min(c["start"] for _, c in items),
            "end_skew_ns": max(c["end"] for _, c in items) - min(c["end"] for _, c in items),
            "bytes": max(c["bytes"] for _, c in items),
            "time_ns": max(c["end"] for _, c in items) - last_start,
        })
    return out


def main(paths: list[str]) -> int:
    per_rank = [rank_numbers(load(p)) for p in paths]
    for r, nums in enumerate(per_rank):
        print(r, {k: v for k, v in nums.items() if k != "collectives"})
    for i in instances(per_rank):
        print(i)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
