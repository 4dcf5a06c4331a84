"""Test oracle for the SQL link derivation: the plain stack sweep it replaced, run on the stored tables.

Per group (host thread (pid, tid); GPU annotations (device, stream)) the items are visited in the order
(start asc, end desc, annotation < op < launch, id); a launch's end is its start. Two stacks (ops,
annotations); before each item every interval with end <= its start is popped from the top.
An op's parent is the top op, its top the bottom op (itself when the stack is empty), its depth the
stack size, its phase the top annotation; a launch's leaf/top/phase likewise; an annotation's parent
is the top annotation.
"""

from __future__ import annotations

from collections import defaultdict


def sweep(store, trace_id: str) -> dict:
    """{('op'|'launch'|'ann', id): (up, top, depth, phase)} from the stack sweep over stored intervals."""
    q = store.con.execute
    items = []
    for oid, pid, tid, s, e in q(
        "SELECT op_id, pid, tid, start_ns, end_ns FROM cpu_ops WHERE trace_id = ?", [trace_id]
    ).fetchall():
        items.append(((0, pid, tid), s, e, 1, oid))
    for lid, pid, tid, s in q(
        "SELECT launch_id, pid, tid, start_ns FROM launches WHERE trace_id = ?", [trace_id]
    ).fetchall():
        items.append(((0, pid, tid), s, s, 2, lid))
    for aid, kind, pid, tid, dev, s, e in q(
        "SELECT ann_id, kind, pid, tid, device, start_ns, end_ns FROM annotations WHERE trace_id = ?",
        [trace_id],
    ).fetchall():
        grp = (1, dev, tid) if kind == "gpu" else (0, pid, tid)
        items.append((grp, s, e, 0, aid))
    by_group = defaultdict(list)
    for it in items:
        by_group[it[0]].append(it)
    out = {}
    for group in by_group.values():
        group.sort(key=lambda it: (it[1], -it[2], it[3], it[4]))
        ops: list[tuple[int, int]] = []
        anns: list[tuple[int, int]] = []
        for _, s, e, k, i in group:
            while ops and ops[-1][1] <= s:
                ops.pop()
            while anns and anns[-1][1] <= s:
                anns.pop()
            phase = anns[-1][0] if anns else None
            if k == 1:
                out[("op", i)] = (ops[-1][0] if ops else None, ops[0][0] if ops else i, len(ops), phase)
                ops.append((i, e))
            elif k == 2:
                out[("launch", i)] = (ops[-1][0] if ops else None, ops[0][0] if ops else None, None,
                                      phase)
            else:
                out[("ann", i)] = (anns[-1][0] if anns else None, None, None, None)
                anns.append((i, e))
    return out


def stored(store, trace_id: str) -> dict:
    """The same keys and tuples as ``sweep``, read from the links the ingest stored."""
    q = store.con.execute
    out = {}
    for oid, *rest in q(
        "SELECT op_id, parent_op_id, top_op_id, depth, phase_id FROM cpu_ops WHERE trace_id = ?",
        [trace_id],
    ).fetchall():
        out[("op", oid)] = tuple(rest)
    for lid, leaf, top, phase in q(
        "SELECT launch_id, leaf_op_id, top_op_id, phase_id FROM launches WHERE trace_id = ?", [trace_id]
    ).fetchall():
        out[("launch", lid)] = (leaf, top, None, phase)
    for aid, parent in q(
        "SELECT ann_id, parent_ann_id FROM annotations WHERE trace_id = ?", [trace_id]
    ).fetchall():
        out[("ann", aid)] = (parent, None, None, None)
    return out
