"""A TensorBoard-style log directory into the store while the dashboard runs (``kernelscope dashboard --logdir``).

``torch.profiler.tensorboard_trace_handler(dir, worker_name=None, use_gzip=False)`` writes one file per
completed schedule cycle per worker: ``<worker>.<time.time_ns()>.pt.trace.json[.gz]`` (default worker
``<hostname>_<pid>``), written in place (the ``.gz`` is streamed from a temporary JSON). ``Watcher.poll`` looks at
DIR (recursively; each folder on its own, as TensorBoard took each folder as one run):

- **When a file is complete.** Its size and mtime are the same as at the previous poll and it has not changed for
  ``quiet_s`` (by its mtime, or by the poller's own clock since it first saw it so: a file server's clock may
  differ); then it is read once (``scan``: the sha256 of the decompressed bytes, as ingest computes it, the
  ``ProfilerStep#N`` numbers it covers, its ``distributedInfo``) and taken when its gzip stream reached its end
  marker and its JSON ends with ``}``. A file that stays incomplete for ``truncated_after_s`` is ingested with
  salvage and marked truncated (``traces.truncated``), as ``kernelscope ingest --salvage`` does. Content already
  in the store (same hash) is skipped.
- **Which files are one run.** A file is a rank trace when its ``distributedInfo`` says world size > 1 or its
  worker name holds ``rank<N>`` (storage/ranks.py). Rank traces of one folder covering the same ProfilerStep
  numbers (without steps: the same cycle ordinal of each worker, by the time in their names) are the ranks of
  ONE run, ingested together by ``rankrun.ingest_rank_run`` as ``kernelscope ingest RUN_DIR`` does; two files
  claiming one rank there (a second job into the same folder) start another run. A run is taken when every rank
  of the world size (after a partial run: every rank that run had) is there, else once no file of the folder is
  still being written and the newest is ``rank_wait_s`` old (then it is a partial run, said on its traces).
  Successive cycles of a worker are separate traces; any other file is a trace of its own.
- **Names and labels.** A trace is named ``<worker>.steps<A>-<B>`` (``.step<A>``; without steps the file name
  less ``.pt.trace.json``) and labelled ``worker``, ``step_first``/``step_last`` and ``logdir`` (DIR's name and
  the subfolder); a run is named ``<logdir> steps <A>-<B>``.
- **Pages keep working.** One writer, many readers (storage/lock.py): each unit (a trace or a run) is ingested
  into a private stage store first, where the parsing and deriving happen, and then copied into the store in one
  short transaction (``copy_traces``), so pages wait for a copy (well under a second for cycle-sized traces)
  rather than for a whole ingest.

``storage/logdir_process.start``/``stop`` run a ``Watcher`` in a child process beside the dashboard (DuckDB lets
one process write or many read a store; the dashboard's pages read it from the parent).
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import KernelscopeError, StoreError, StoreLockedError
from ..units import NS_PER_S
from . import ranks
from .onetrace import IngestResult

#: tensorboard_trace_handler's file names: worker, the optional time.time_ns() of the export, the suffix.
NAME_RE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<ns>\d+))?\.pt\.trace\.json(?P<gz>\.gz)?$")
_STEP_RE = re.compile(rb'"ProfilerStep#(\d+)"')
#: Seconds a file must be unchanged (and its size and mtime the same as at the last poll) before it is read.
QUIET_S = 2.0
#: Seconds a file that is not complete (no gzip end marker, no closing brace) stays unchanged before it is
#: taken as cut for good and ingested with salvage.
TRUNCATED_AFTER_S = 60.0
#: Seconds the ranks of a cycle wait for their missing ranks (after the newest file of the cycle was written).
RANK_WAIT_S = 30.0
#: Seconds between two polls of the directory.
POLL_S = 1.0


def parse_name(name: str) -> tuple[str, int | None] | None:
    """(worker, time_ns or None) of a tensorboard_trace_handler file name, None for any other name."""
    m = NAME_RE.match(name)
    if not m or not m.group("worker"):
        return None
    return m.group("worker"), (int(m.group("ns")) if m.group("ns") else None)


def trace_files(logdir) -> list[pathlib.Path]:
    """Regular files under ``logdir`` (recursively, hidden folders left out) named as tensorboard_trace_handler
    names them, sorted."""
    out = []
    for root, dirs, files in os.walk(logdir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in files:
            p = pathlib.Path(root) / f
            if parse_name(f) is not None and p.is_file():
                out.append(p)
    return sorted(out)


@dataclass
class FileFacts:
    """What one read of a trace file found (``scan``)."""

    path: pathlib.Path
    folder: str  # relative to the logdir ('.' for the logdir itself)
    worker: str
    time_ns: int | None
    content_hash: str
    steps: tuple[int, ...]  # ProfilerStep numbers, sorted
    complete: bool  # gzip end marker reached and the JSON ends with '}'
    distributed: dict | None
    mtime: float
    ordinal: int = 0  # the cycle's place among its worker's files in its folder (1-based; set by the Watcher)

    @property
    def rank(self) -> int | None:
        m = ranks.Member("file", self.path, self.worker)
        m.set_distributed(self.distributed)
        m.name_rank = ranks.name_rank(self.worker)
        return m.rank

    @property
    def world(self) -> int | None:
        try:
            return int((self.distributed or {}).get("world_size"))
        except (TypeError, ValueError):
            return None

    @property
    def is_rank_trace(self) -> bool:
        return (self.world or 0) > 1 or ranks.name_rank(self.worker) is not None

    @property
    def cycle(self) -> tuple:
        """What the ranks of one cycle share: their folder and ProfilerStep numbers (else the cycle ordinal)."""
        return (self.folder, ("steps", self.steps) if self.steps else ("cycle", self.ordinal))

    def steps_text(self, sep: str = "") -> str:
        if not self.steps:
            return ""
        a, b = self.steps[0], self.steps[-1]
        return f"step{sep}{a}" if a == b else f"steps{sep}{a}-{b}"

    def trace_name(self) -> str:
        if self.steps:
            return f"{self.worker}.{self.steps_text()}"
        return self.path.name.split(".pt.trace.json")[0]

    def labels(self, logdir_name: str) -> dict:
        out = {"worker": self.worker, "logdir": logdir_name}
        if self.steps:
            out.update(step_first=self.steps[0], step_last=self.steps[-1])
        return out


def scan(path: pathlib.Path, logdir: pathlib.Path) -> FileFacts:
    """Read a trace file once: content hash (``parsers.source.Source``, salvaging a cut gzip: the hash ingest
    computes for it), ProfilerStep numbers, whether it is complete, its distributedInfo. ParseError for a file
    that cannot be read at all."""
    from ..parsers.source import Source

    st = path.stat()
    src = Source(path, salvage=True)
    steps: set[int] = set()
    tail = b""
    try:
        carry = b""
        while block := src.read():
            text = carry + block
            steps.update(int(n) for n in _STEP_RE.findall(text))
            carry = text[-64:]  # a name cut between two blocks is found in the next
            if block.strip():
                tail = block.rstrip()[-1:]
    finally:
        src.close()
    worker, ns = parse_name(path.name) or (path.name, None)
    rel = path.parent.relative_to(logdir).as_posix() if path.parent != logdir else "."
    return FileFacts(path=path, folder=rel, worker=worker, time_ns=ns, content_hash=src.sha.hexdigest(),
                     steps=tuple(sorted(steps)), complete=src.cut is None and tail == b"}",
                     distributed=ranks.peek_distributed(path), mtime=st.st_mtime)


@dataclass
class Unit:
    """What one ingest takes: a trace of its own, or the rank traces of one run."""

    files: list[FileFacts]
    run: bool

    @property
    def first_ns(self) -> int:
        return min(f.time_ns or int(f.mtime * NS_PER_S) for f in self.files)


def plan(ready: list[FileFacts], *, busy_folders=(), learned=None, workers=None, now: float, rank_wait_s: float
         ) -> tuple[list[Unit], list[FileFacts]]:
    """(units to ingest now, files that wait) from the complete files ``ready``. ``busy_folders``: folders where a
    file is still being written; ``learned``: folder -> ranks of the last run taken there; ``workers``: folder ->
    rank numbers in the worker names seen there (the expected ranks when no distributedInfo gives a world)."""
    learned, workers = learned or {}, workers or {}
    units = [Unit([f], False) for f in ready if not f.is_rank_trace]
    cycles: dict[tuple, list[list[FileFacts]]] = {}
    for f in sorted((f for f in ready if f.is_rank_trace), key=lambda f: (f.time_ns or 0, f.worker)):
        runs = cycles.setdefault(f.cycle, [[]])
        if any(g.rank == f.rank for g in runs[-1]):  # a second job into the folder: another run
            runs.append([])
        runs[-1].append(f)
    waiting: list[FileFacts] = []
    for (folder, _key), runs in cycles.items():
        for members in runs:
            have = {f.rank for f in members}
            world = max((f.world or 0 for f in members), default=0)
            expect = learned.get(folder) or (set(range(world)) if world > 1 else set(workers.get(folder, ())))
            newest = max(f.mtime for f in members)
            if expect <= have or (folder not in busy_folders and now - newest >= rank_wait_s):
                units.append(Unit(members, True))
            else:
                waiting.extend(members)
    units.sort(key=lambda u: u.first_ns)
    return units, waiting


@dataclass
class _Seen:
    key: tuple[int, int]  # (size, mtime_ns) at the last poll
    since: float  # when this poller first saw that key (its own clock: a file server's clock may differ)
    facts: FileFacts | None = None
    state: str = "new"  # new | ready | done | failed


@dataclass
class Watcher:
    """Polls a log directory and ingests complete trace files into the store at ``db_path`` (see the module).
    ``poll(now)`` does one round and returns what it did; ``say`` gets one line per trace ingested, skipped or
    failed."""

    logdir: pathlib.Path
    db_path: pathlib.Path
    stage_dir: pathlib.Path | None = None
    quiet_s: float = QUIET_S
    truncated_after_s: float = TRUNCATED_AFTER_S
    rank_wait_s: float = RANK_WAIT_S
    python_functions: bool = True
    say: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr, flush=True))
    _seen: dict = field(default_factory=dict)
    _learned: dict = field(default_factory=dict)
    _missing_said: bool = False
    _lock_said: bool = False

    def __post_init__(self):
        self.logdir = pathlib.Path(self.logdir).resolve()
        self.db_path = pathlib.Path(self.db_path)
        self.logdir_name = self.logdir.name or str(self.logdir)

    def poll(self, now: float | None = None) -> list[IngestResult]:
        """One round: look at every trace file, read those that became quiet, ingest the units that are ready.
        ``now``: seconds since the epoch (default: the clock), compared with the files' mtimes."""
        now = time.time() if now is None else now
        if not self.logdir.is_dir():
            if not self._missing_said:
                self._missing_said = True
                self.say(f"kernelscope: logdir: waiting for {self.logdir} to appear")
            return []
        if self._missing_said:
            self._missing_said = False
            self.say(f"kernelscope: logdir: {self.logdir} appeared; watching it")
        files = trace_files(self.logdir)
        for gone in set(self._seen) - set(files):
            del self._seen[gone]
        busy, scanned, results = set(), [], []
        for path in files:
            try:
                st = path.stat()
            except OSError:
                continue
            key = (st.st_size, st.st_mtime_ns)
            seen = self._seen.get(path)
            if seen is None or seen.key != key:  # new or still growing: look again next time
                self._seen[path] = _Seen(key, now)
                busy.add(self._folder(path))
                continue
            if seen.state in ("done", "failed"):
                continue
            age = now - min(st.st_mtime, seen.since)  # unchanged for this long
            if age < self.quiet_s:
                busy.add(self._folder(path))
                continue
            if seen.facts is None:
                try:
                    seen.facts = scan(path, self.logdir)
                except (KernelscopeError, OSError) as exc:
                    seen.state = "failed"
                    results.append(self._tell(IngestResult(str(path), "failed", None, _first_line(exc))))
                    continue
                scanned.append(seen)
            if not seen.facts.complete and age < self.truncated_after_s:
                busy.add(self._folder(path))  # cut: being written, or cut for good (salvaged later)
                continue
            seen.state = "ready"
        results += self._skip_stored(scanned)
        self._number_cycles(files)
        ready = [s.facts for s in self._seen.values() if s.state == "ready"]
        units, _waiting = plan(ready, busy_folders=busy, learned=self._learned, workers=self._workers(files),
                               now=now, rank_wait_s=self.rank_wait_s)
        for unit in units:
            results += self._ingest(unit)
        return results

    def _folder(self, path: pathlib.Path) -> str:
        return path.parent.relative_to(self.logdir).as_posix() if path.parent != self.logdir else "."

    def _number_cycles(self, files) -> None:
        """Each file's cycle ordinal among its worker's files in its folder (by the time in the names)."""
        by: dict[tuple, list] = {}
        for p in files:
            worker, ns = parse_name(p.name) or (p.name, None)
            by.setdefault((self._folder(p), worker), []).append((ns or 0, p.name, p))
        for group in by.values():
            for i, (_ns, _n, p) in enumerate(sorted(group), 1):
                seen = self._seen.get(p)
                if seen is not None and seen.facts is not None:
                    seen.facts.ordinal = i

    def _workers(self, files) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for p in files:
            r = ranks.name_rank((parse_name(p.name) or (p.name,))[0])
            if r is not None:
                out.setdefault(self._folder(p), set()).add(r)
        return out

    def _skip_stored(self, scanned: list[_Seen]) -> list[IngestResult]:
        """Files whose content the store already holds: done, one line for them all."""
        if not scanned or not self.db_path.exists():
            return []
        from .store import open_store
        from .tracerow import stored_id

        try:
            with open_store(self.db_path, read_only=True) as store:
                stored = {s.facts.path: stored_id(store.con, s.facts.content_hash) for s in scanned}
        except StoreError:  # busy or not yet migrated: the copy checks again
            return []
        out = []
        for s in scanned:
            if stored.get(s.facts.path):
                s.state = "done"
                out.append(IngestResult(str(s.facts.path), "skipped", stored[s.facts.path],
                                        f"already stored as {stored[s.facts.path]}"))
        if len(out) == 1:
            self._tell(out[0])
        elif out:
            self.say(f"kernelscope: logdir: skipped {len(out)} files already in the store")
        return out

    def _tell(self, r: IngestResult) -> IngestResult:
        where = os.path.relpath(r.path, self.logdir)
        note = f"  ({r.notes})" if r.notes else ""  # the id is on the line already
        self.say(f"kernelscope: logdir: {r.status:<8} {r.trace_id or '-':<12}  {where}{note}")
        return r

    def _ingest(self, unit: Unit) -> list[IngestResult]:
        """Ingest a unit into a fresh stage store, label it, copy it into the store; mark its files done (a
        failure, whatever its cause: failed, tried again when a file changes; another writer holding the store:
        tried again at the next poll)."""
        from .store import open_store

        stage_root = self.stage_dir or self.db_path.resolve().parent
        try:
            folder = pathlib.Path(tempfile.mkdtemp(prefix=f".{self.db_path.name}.logdir-", dir=stage_root))
        except OSError as exc:
            raise StoreError(f"cannot make a stage folder beside the store in {stage_root}: {exc.strerror}") from None
        stage = folder / "stage.duckdb"
        try:
            with open_store(stage) as st:
                results = self._stage(st, unit)
            if any(r.status == "ingested" for r in results):
                results = copy_traces(self.db_path, stage, results)
        except StoreLockedError as exc:  # another writer (an ingest): this unit waits for the next poll
            if not self._lock_said:
                self._lock_said = True
                self.say(f"kernelscope: logdir: {_first_line(exc)}; trying again")
            return []
        except Exception as exc:  # a store that cannot be written, or a bug: said once, not retried every poll
            why = _first_line(exc) if isinstance(exc, KernelscopeError) else f"{type(exc).__name__}: {_first_line(exc)}"
            results = [IngestResult(str(f.path), "failed", None, why) for f in unit.files]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self._lock_said = False
        by_path = {str(f.path): f for f in unit.files}
        for r in results:
            f = by_path.get(r.path)
            if f is not None:
                self._seen[f.path].state = "failed" if r.status == "failed" else "done"
            elif r.status == "failed":  # the run as a whole failed
                for f in unit.files:
                    self._seen[f.path].state = "failed"
            self._tell(r)
        if unit.run and any(r.status == "ingested" for r in results):
            self._learned[unit.files[0].folder] = {f.rank for f in unit.files}
        return results

    def _stage(self, st, unit: Unit) -> list[IngestResult]:
        folder = unit.files[0].folder
        name = self.logdir_name if folder == "." else f"{self.logdir_name}/{folder}"
        return stage_unit(st, unit, name, python_functions=self.python_functions,
                          salvage=not all(f.complete for f in unit.files))


def stage_unit(st, unit: Unit, logdir_name: str, *, labels=None, python_functions: bool = True,
               salvage: bool = False) -> list[IngestResult]:
    """Ingest one unit into the open store ``st``: a trace of its own, or the ranks of one run through
    ``rankrun.ingest_rank_run``; named and labelled as the module says (``labels``: more labels, the user's)."""
    from .ingest import ingest_file, ingest_rank_run
    from .tracerow import insert_labels

    extra = dict(labels or {})
    if not unit.run:
        f = unit.files[0]
        return [ingest_file(st, f.path, name=f.trace_name(), labels={**f.labels(logdir_name), **extra},
                            python_functions=python_functions, salvage=salvage)]
    members = []
    for f in unit.files:
        m = ranks.Member("file", f.path, f.trace_name())
        m.set_distributed(f.distributed)
        m.name_rank = ranks.name_rank(f.worker)
        members.append(m)
    results = ingest_rank_run(st, unit.files[0].path.parent, members, labels=extra or None,
                              python_functions=python_functions, salvage=salvage)
    by_path = {str(f.path): f for f in unit.files}
    done = [(r.trace_id, by_path[r.path]) for r in results if r.status == "ingested" and r.path in by_path]
    if done:
        f0 = unit.files[0]
        st.con.execute("BEGIN TRANSACTION")
        for tid, f in done:
            insert_labels(st.con, tid, f.labels(logdir_name))
        st.con.execute("UPDATE runs SET name = ? WHERE run_id IN (SELECT run_id FROM traces WHERE "
                       "list_contains(?, trace_id))",
                       [f"{logdir_name} {f0.steps_text(' ') or f'cycle {f0.ordinal}'}", [t for t, _ in done]])
        st.con.execute("COMMIT")
    return results


def ingest_handler_files(store, paths, *, labels=None, python_functions: bool = True,
                         salvage: bool = False) -> list[IngestResult]:
    """``kernelscope ingest`` of files named as tensorboard_trace_handler names them: each folder taken as a log
    directory, grouped (ranks of one cycle = one run, successive cycles separate traces), named and labelled
    exactly as the watcher does, with every file already complete (a cut one fails, or is salvaged with
    ``salvage``, as any ingest)."""
    by_folder: dict[pathlib.Path, list[pathlib.Path]] = {}
    for p in paths:
        by_folder.setdefault(pathlib.Path(p).parent, []).append(pathlib.Path(p))
    results: list[IngestResult] = []
    for folder, files in by_folder.items():
        facts = []
        for p in sorted(files):
            try:
                facts.append(scan(p, folder))
            except (KernelscopeError, OSError) as exc:
                results.append(IngestResult(str(p), "failed", None, _first_line(exc)))
        by_worker: dict[str, list[FileFacts]] = {}
        for f in facts:
            by_worker.setdefault(f.worker, []).append(f)
        for group in by_worker.values():
            for i, f in enumerate(sorted(group, key=lambda f: (f.time_ns or 0, f.path.name)), 1):
                f.ordinal = i
        workers = {".": {r for f in facts if (r := ranks.name_rank(f.worker)) is not None}}
        units, _ = plan(facts, workers=workers, now=float("inf"), rank_wait_s=0.0)
        for unit in units:
            results += stage_unit(store, unit, folder.name or str(folder), labels=labels,
                                  python_functions=python_functions, salvage=salvage)
    return results


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def copy_traces(db_path, stage_path, results: list[IngestResult]) -> list[IngestResult]:
    """Copy the traces ingested into the stage store ``stage_path`` (``results``' 'ingested' ones) with their
    runs into the store at ``db_path``, in ONE transaction: every table with a trace_id column
    (``queries.trace_tables``), then ``runs``. A trace whose content the store meanwhile got is 'skipped'; one
    whose id another content holds there (a 48-bit prefix collision) 'failed'. Returns ``results`` updated."""
    from .queries import trace_tables
    from .staging import sql_path
    from .store import open_store

    ids = [r.trace_id for r in results if r.status == "ingested"]
    with open_store(db_path) as store:
        con = store.con
        con.execute(f"ATTACH {sql_path(pathlib.Path(stage_path))} AS ks_stage (READ_ONLY)")
        try:
            clash = dict(con.execute(
                """SELECT s.trace_id, m.trace_id FROM ks_stage.traces s JOIN main.traces m
                   ON m.content_hash = s.content_hash OR m.trace_id = s.trace_id
                   WHERE list_contains(?, s.trace_id)""", [ids]).fetchall())
            same = {s: m for s, m in clash.items() if con.execute(
                "SELECT count(*) FROM main.traces WHERE trace_id = ? AND content_hash = "
                "(SELECT content_hash FROM ks_stage.traces WHERE trace_id = ?)", [m, s]).fetchone()[0]}
            take = [i for i in ids if i not in clash]
            con.execute("BEGIN TRANSACTION")
            try:
                for table in trace_tables(con):
                    cols = ", ".join(f'"{c}"' for (c,) in con.execute(
                        "SELECT column_name FROM information_schema.columns WHERE table_catalog = current_database() "
                        "AND table_schema = 'main' AND table_name = ? ORDER BY ordinal_position", [table]).fetchall())
                    con.execute(f'INSERT INTO main."{table}" ({cols}) SELECT {cols} FROM ks_stage."{table}" '
                                "WHERE list_contains(?, trace_id)", [take])
                cols = ", ".join(f'"{c}"' for (c,) in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_catalog = current_database() "
                    "AND table_schema = 'main' AND table_name = 'runs' ORDER BY ordinal_position").fetchall())
                con.execute(f"""INSERT INTO main.runs ({cols}) SELECT {cols} FROM ks_stage.runs
                                WHERE run_id IN (SELECT run_id FROM ks_stage.traces WHERE list_contains(?, trace_id))
                                  AND run_id NOT IN (SELECT run_id FROM main.runs)""", [take])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        finally:
            con.execute("DETACH ks_stage")
    out = []
    for r in results:
        if r.status == "ingested" and r.trace_id in same:
            r = IngestResult(r.path, "skipped", same[r.trace_id], f"already stored as {same[r.trace_id]}", r.events)
        elif r.status == "ingested" and r.trace_id in clash:
            r = IngestResult(r.path, "failed", None, f"its trace id {r.trace_id} is taken in the store by another "
                             "trace; ingest the file with `kernelscope ingest`", r.events)
        out.append(r)
    return out


def describe(logdir) -> str:
    """One sentence on what the log directory holds now, for a page that has no trace to show yet."""
    logdir = pathlib.Path(logdir)
    if not logdir.exists():
        return (f"{logdir} does not exist yet; torch.profiler.tensorboard_trace_handler creates it when the first "
                "profiling cycle ends")
    if not logdir.is_dir():
        return f"{logdir} is not a directory"
    n = len(trace_files(logdir))
    if not n:
        return (f"{logdir} holds no trace files yet (*.pt.trace.json[.gz], written by "
                "torch.profiler.tensorboard_trace_handler when a profiling cycle ends)")
    return (f"{logdir} holds {n} trace file{'s' if n != 1 else ''}, ingested once complete (the ranks of a cycle "
            f"together, once all are there or {RANK_WAIT_S:g} s after the last)")
