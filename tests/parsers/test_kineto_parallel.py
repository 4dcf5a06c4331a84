"""One trace decoded by worker processes (parsers/kineto/parallel.py) stores exactly what the one-process reader
stores: every table of the store, row for row, with small blocks and chunks so a small sample splits into many
chunks, for a gzip file with ``[memory]`` events, a plain file cut short (``--salvage``), and at the parser, a
file whose chunks fall off the fast path (names holding ``}, {``, NaN args and comma decimals to repair)."""

from __future__ import annotations

import gzip
import multiprocessing
import multiprocessing.forkserver as forkserver
import re
from pathlib import Path

import pyarrow as pa
import pytest
from stores import empty

from kernelscope.parsers import source
from kernelscope.parsers.kineto import KinetoReader, parallel
from kernelscope.storage import staging
from kernelscope.storage.onetrace import ingest_file, trace_reader
from kernelscope.storage.store import open_store

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "qwen2_train_full" / "trace.json.gz"
#: Columns that differ between two ingests of the same file whatever the reader (when it was ingested).
VOLATILE = {("traces", "ingested_ns")}


@pytest.fixture(scope="module")
def pool():
    """One pool of two workers for the module (each reader would otherwise start its own: ~1 s of CPU)."""
    with parallel.shared_pool(2):
        yield


@pytest.fixture
def small_chunks(monkeypatch):
    """64 KiB blocks, ~100 KB chunks and no size floor: the 2 MB sample is ~20 chunks, decoded by workers
    from the first one."""
    monkeypatch.setattr(source, "BLOCK_BYTES", 64 << 10)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 100_000)
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "DECODE_WHILE_STARTING", False)


def store_rows(db: Path) -> dict[str, list[tuple]]:
    """Every table of a store: its rows, sorted (a volatile column left out)."""
    out = {}
    with open_store(db, read_only=True) as st:
        tables = [r[0] for r in st.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1").fetchall()]
        for t in tables:
            cols = [r[0] for r in st.con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' AND table_name = ? "
                "ORDER BY ordinal_position", [t]).fetchall() if (t, r[0]) not in VOLATILE]
            rows = st.con.execute(f'SELECT {", ".join(chr(34) + c + chr(34) for c in cols)} FROM "{t}"').fetchall()
            out[t] = sorted(rows, key=repr)
    return out


def ingest(tmp_path: Path, name: str, trace: Path, workers: str, monkeypatch, **opts) -> tuple[Path, list]:
    """``trace`` ingested into a new store with ``workers`` parse workers: (the store, the staged files' parts)."""
    monkeypatch.setenv(parallel.ENV_WORKERS, workers)
    db = empty(tmp_path / f"{name}.duckdb")
    seen = []
    view = staging.raw_view
    monkeypatch.setattr(staging, "raw_view", lambda con, files: (seen.append(files), view(con, files))[1])
    with open_store(db) as st:
        res = ingest_file(st, trace, **opts)
    monkeypatch.setattr(staging, "raw_view", view)
    assert res.status == "ingested", res.message
    return db, [p for files in seen for p in files.parts]


def assert_same_store(tmp_path: Path, trace: Path, monkeypatch, min_parts: int = 5, **opts) -> dict:
    """Every table equal after a one-process ingest and one whose workers wrote most rows as Parquet parts
    (each part's seq moved on in the staged view); also when some rows came through the parent."""
    one_db, no_parts = ingest(tmp_path, "one", trace, "1", monkeypatch, **opts)
    two_db, parts = ingest(tmp_path, "two", trace, "2", monkeypatch, **opts)
    assert not no_parts and len(parts) >= min_parts, parts
    assert [p.seq_base for p in parts] == sorted(p.seq_base for p in parts)
    one, two = store_rows(one_db), store_rows(two_db)
    assert one.keys() == two.keys()
    for table in one:
        assert two[table] == one[table], f"table {table} differs"
    return one


def test_workers_chosen(monkeypatch, small_chunks):
    monkeypatch.delenv(parallel.ENV_WORKERS, raising=False)
    assert [parallel.parse_workers(c) for c in (1, 2, 3, 16)] == [1, 2, 2, 15]  # the parent keeps a core, but of 2
    monkeypatch.setenv(parallel.ENV_WORKERS, "x")
    assert parallel.parse_workers(16) == 15
    monkeypatch.setenv(parallel.ENV_WORKERS, "2")
    assert type(trace_reader(SAMPLE)) is parallel.ParallelKinetoReader
    monkeypatch.setenv(parallel.ENV_WORKERS, "1")
    assert type(trace_reader(SAMPLE)) is KinetoReader  # one worker: the one-process reader itself


def test_gzip_with_memory_events(tmp_path, monkeypatch, pool, small_chunks):
    rows = assert_same_store(tmp_path, SAMPLE, monkeypatch)
    assert len(rows["memory_events"]) > 100 and len(rows["gpu_activities"]) > 100 and len(rows["flows"]) > 100
    reader = parallel.ParallelKinetoReader(SAMPLE, workers=2)
    n = sum(b.num_rows for b in reader)
    assert reader.chunks >= 10 and reader.fallbacks == 0 and n == reader.meta.events


def test_plain_truncated_salvage(tmp_path, monkeypatch, pool, small_chunks):
    text = gzip.decompress(SAMPLE.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) * 2 // 3])  # ends inside an event
    rows = assert_same_store(tmp_path, cut, monkeypatch, salvage=True)
    (truncated,) = [r for r in rows["traces"]]
    assert "inside the event array" in repr(truncated)


def test_chunks_off_the_fast_path(tmp_path, monkeypatch, pool, small_chunks):
    """Boundaries inside strings and invalid JSON: those chunks are decoded again by the parent (repairs,
    carries), and batches, meta (warnings, repairs, counts) and error-free rows equal the one-process reader's;
    so does every stored table, where the parent's batches and the workers' parts interleave."""
    text = gzip.decompress(SAMPLE.read_bytes()).decode()
    n = 0

    def weird(m: re.Match) -> str:
        nonlocal n
        n += 1
        return '"name": "w}, {\\"x\\": 1}, {' if n % 3 == 0 else m.group(0)

    text = re.sub(r'"name": "', weird, text)
    text = re.sub(r'"External id": (\d+)', lambda m: '"External id": NaN' if int(m.group(1)) % 40 == 0
                  else m.group(0), text)
    text = text.replace('"Sequence number": 1', '"Sequence number": 1,5', 5)
    path = tmp_path / "weird.json.gz"
    path.write_bytes(gzip.compress(text.encode(), 1))
    one = KinetoReader(path)
    one_rows = pa.Table.from_batches(list(one))
    two = parallel.ParallelKinetoReader(path, workers=2)
    two_rows = pa.Table.from_batches(list(two))
    assert two.fallbacks > 0 and two.chunks > 0
    assert one.meta.warnings and any("repaired" in w for w in one.meta.warnings)
    assert two_rows.equals(one_rows)
    assert two.meta == one.meta
    assert_same_store(tmp_path, path, monkeypatch, min_parts=2)


def test_decoding_in_process_while_the_pool_starts(tmp_path, monkeypatch, pool, small_chunks):
    """The default path: the parent decodes the first blocks itself until the workers answer, then hands the
    rest to them; rows and meta equal the one-process reader's (here the pool 'starts' after 8 blocks)."""
    monkeypatch.setattr(parallel, "DECODE_WHILE_STARTING", True)
    started = parallel.ParallelKinetoReader._pool_started
    calls = []

    def slow_start(self, warming):
        calls.append(1)
        return len(calls) > 8 and started(self, warming)

    monkeypatch.setattr(parallel.ParallelKinetoReader, "_pool_started", slow_start)
    one = KinetoReader(SAMPLE)
    one_rows = pa.Table.from_batches(list(one))
    two = parallel.ParallelKinetoReader(SAMPLE, workers=2)
    two_rows = pa.Table.from_batches(list(two))
    assert len(calls) > 8 and two.chunks >= 5
    assert two_rows.equals(one_rows)
    assert two.meta == one.meta
    calls.clear()
    assert_same_store(tmp_path, SAMPLE, monkeypatch)


def test_a_pool_that_does_not_answer(monkeypatch, pool, small_chunks):
    """Workers that cannot run (here their first call cannot be sent to them) leave the file to the parent."""
    monkeypatch.setattr(parallel, "_ready", lambda: True)  # a lambda cannot be pickled to a worker
    one = KinetoReader(SAMPLE)
    one_rows = pa.Table.from_batches(list(one))
    two = parallel.ParallelKinetoReader(SAMPLE, workers=2)
    two_rows = pa.Table.from_batches(list(two))
    assert two.chunks == 0 and two_rows.equals(one_rows) and two.meta == one.meta


def test_a_cut_gzip_stream_is_the_same_error_through_the_prefetch(tmp_path, pool, small_chunks):
    """The parallel reader decompresses a gzip file ahead in a thread (``source.ReadAhead``); a stream cut short raises
    the one-process reader's error, with the same message, from the block where it breaks."""
    from kernelscope.errors import ParseError

    data = SAMPLE.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) * 3 // 4])
    errors = []
    for reader in (KinetoReader(cut), parallel.ParallelKinetoReader(cut, workers=2)):
        with pytest.raises(ParseError) as exc:
            for _ in reader:
                pass
        errors.append(str(exc.value))
    assert errors[0] == errors[1] and "truncated" in errors[0]
    two = parallel.ParallelKinetoReader(SAMPLE, workers=2)
    two._pool = object()  # as while a pool reads the file: the gzip stream is read through the prefetch
    s = two._source()
    try:
        assert isinstance(s._f, source.ReadAhead) and s.read() == gzip.decompress(data)[: source.BLOCK_BYTES]
    finally:
        s.close()
        two._hasher.close()


def test_ingest_starts_the_pool_first_and_the_reader_takes_it(tmp_path, monkeypatch, small_chunks):
    """`kernelscope ingest FILE` with a Kineto file big enough starts the parse pool before its own imports; the
    reader takes that pool (so it is shut down after the parse, not left idle beside the derivations) and the
    store equals a one-process ingest. A folder or a file too small starts none."""
    from click.testing import CliRunner

    from kernelscope.cli import cli
    from kernelscope.parsers import pool as pools

    taken = []
    take = pools.take
    monkeypatch.setattr(parallel, "take", lambda n: (taken.append(take(n)), taken[-1])[1])
    monkeypatch.setattr(pools, "_SHARED", {})  # not the module's shared pool, when an earlier test started it
    monkeypatch.setattr(pools, "MIN_BYTES", 1 << 20)  # the 2 MB sample's estimate is ~20 MB
    monkeypatch.setenv(parallel.ENV_WORKERS, "2")
    assert isinstance(pools.prestart([SAMPLE.parent], 16), type(pools.nullcontext()))  # a folder: none
    monkeypatch.setattr(pools, "MIN_BYTES", 1 << 30)
    assert isinstance(pools.prestart([SAMPLE], 16), type(pools.nullcontext()))  # too small: none
    monkeypatch.setattr(pools, "MIN_BYTES", 1 << 20)
    db = empty(tmp_path / "cli.duckdb")
    res = CliRunner().invoke(cli, ["ingest", str(SAMPLE), "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert len(taken) == 1 and taken[0] is not None  # the reader found the pool the command had started
    assert taken[0]._shutdown_thread and not pools._STARTED  # and shut it down after its parse,
    # and the fork server too (nothing idle beside the derivations), unless workers forked from it still run
    # (the module's shared pool, when an earlier test in this process started it): it would never go then
    others = multiprocessing.active_children()
    assert (forkserver._forkserver._forkserver_pid is None) == (not others), others
    one_db, _ = ingest(tmp_path, "one", SAMPLE, "1", monkeypatch)
    assert store_rows(db) == store_rows(one_db)


def test_a_bare_array_of_events_reads_as_its_wrapped_twin(tmp_path, monkeypatch, pool, small_chunks):
    """PyTorch 1.8 wrote the event array alone (TensorBoard's own resnet50 samples in kineto's tb_plugin, 2020):
    it reads as the same events wrapped in ``{"traceEvents": ...}``, batch for batch, by the one-process and the
    parallel reader alike; cut short it is refused as a truncated array, and salvaged with ``salvage``."""
    import json

    events = json.loads(gzip.decompress(SAMPLE.read_bytes()))["traceEvents"]
    bare, wrapped = tmp_path / "bare.json", tmp_path / "wrapped.json"
    bare.write_text(json.dumps(events, indent=1))
    wrapped.write_text(json.dumps({"traceEvents": events}, indent=1))
    one = pa.Table.from_batches(list(KinetoReader(bare)))
    assert one.num_rows > 1000 and one.equals(pa.Table.from_batches(list(KinetoReader(wrapped))))
    assert pa.Table.from_batches(list(parallel.ParallelKinetoReader(bare, workers=2))).equals(one)
    assert_same_store(tmp_path, bare, monkeypatch)
    cut = tmp_path / "cut.json"
    cut.write_bytes(bare.read_bytes()[: bare.stat().st_size // 2])
    with pytest.raises(Exception, match="ends inside the traceEvents array"):
        list(KinetoReader(cut))
    kept = KinetoReader(cut, salvage=True)
    assert 0 < sum(b.num_rows for b in kept) < one.num_rows and kept.meta.truncated


def test_a_script_that_reads_in_parallel_is_not_run_again_in_the_workers(tmp_path):
    """multiprocessing runs the parent's main script again in each child: tests/hostile_harness.py (which imports
    pandas, refused in parse workers) printed a worker's traceback for every large gzip case once 2 cores got two
    workers. A script that imports pandas and reads a trace with worker processes at its top level runs once, its
    rows come from the workers, and nothing is printed."""
    import subprocess
    import sys

    script = tmp_path / "user_script.py"
    script.write_text(
        "import sys\nimport pandas\nprint('script ran', file=sys.stderr)\n"
        "from kernelscope.parsers import source\nfrom kernelscope.parsers.kineto import parallel\n"
        "source.BLOCK_BYTES = 64 << 10\nparallel.MIN_BYTES = 0\nparallel.CHUNK_BYTES = 100_000\nparallel.DECODE_WHILE_STARTING = False\n"
        f"r = parallel.ParallelKinetoReader({str(SAMPLE)!r}, workers=2)\n"
        "n = sum(b.num_rows for b in r)\nprint(n, r.chunks, r.fallbacks)\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "script ran\n", res.stderr
    n, chunks, fallbacks = map(int, res.stdout.split())
    assert n > 1000 and chunks >= 10 and fallbacks == 0
