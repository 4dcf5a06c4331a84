"""The bytes of one trace file, for every parser: the regular-file check, gzip told by its magic bytes, a
sha256 of the decompressed bytes updated as they are read (so a ``.json`` and its ``.json.gz`` twin hash
alike), the salvage of a gzip stream cut short (``Source(path, salvage=True)``), and decompression ahead of
the reader in a thread (``Source.read_ahead``, the parallel Kineto reader's).
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import stat
import zlib
from pathlib import Path

from kernelscope.errors import ParseError

#: Decompressed bytes read per block.
BLOCK_BYTES = 4 << 20
#: What a refusal of a cut file suggests (``kernelscope ingest --salvage``).
SALVAGE_HINT = "`kernelscope ingest --salvage` keeps every complete event before the cut"


def check_regular_file(path: Path) -> None:
    """ParseError unless ``path`` is a regular file (or a link to one): a FIFO would block ``open`` forever,
    a device (/dev/zero) never ends, a symlink loop cannot be opened."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ParseError("a symlink loop (too many levels of symbolic links); point it at a trace file") from None
        raise ParseError(f"cannot open the file ({exc.strerror}); check the path and permissions") from None
    if stat.S_ISDIR(mode):
        raise ParseError("this is a directory, not a trace file")
    if not stat.S_ISREG(mode):
        what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        raise ParseError(f"{what}, not a regular file; give a trace file (copy the data into a file first)")


class Source:
    """Decompressed byte blocks of a file (gzip detected by magic bytes), hashing as it reads.

    ``salvage``: a gzip stream that ends before its end marker, or whose data turns corrupt, gives the bytes
    that decompress before that point and then ends, with ``cut`` saying why (else None), instead of an error.
    """

    def __init__(self, path: Path, salvage: bool = False):
        self.path = path
        self.sha = hashlib.sha256()
        self.offset = 0  # decompressed bytes handed out so far
        self.cut: str | None = None
        check_regular_file(path)
        try:
            raw = open(path, "rb")
        except OSError as exc:
            raise ParseError(f"cannot open the file ({exc.strerror}); check the path and permissions") from None
        magic = raw.read(2)
        raw.seek(0)
        self.gz = magic == b"\x1f\x8b"
        self._raw = raw
        if self.gz and salvage:
            self._f = GzipSalvage(raw, self)
        else:
            self._f = gzip.GzipFile(fileobj=raw, mode="rb") if self.gz else raw
        if not magic:
            self.close()
            raise ParseError("the file is empty (0 bytes); it holds no trace")

    def read(self, n: int | None = None) -> bytes:
        """The next ``n`` decompressed bytes (default ``BLOCK_BYTES``, read when called); b"" at the end."""
        try:
            block = self._f.read(BLOCK_BYTES if n is None else n)
        except EOFError:
            raise ParseError("the gzip stream is truncated (it ends before its end marker: cut while being written "
                             f"or copied); {SALVAGE_HINT}, or copy the file again") from None
        except gzip.BadGzipFile as exc:
            raise ParseError(f"the gzip file is damaged ({exc}); copy the file again") from None
        except zlib.error as exc:
            raise ParseError(f"the gzip data is corrupt ({exc}); copy the file again") from None
        except OSError as exc:
            raise ParseError(f"cannot read the file ({exc}); check the file") from None
        self.sha.update(block)
        self.offset += len(block)
        return block

    def read_ahead(self) -> None:
        """Decompress a gzip stream in a thread of its own, ahead of ``read`` (``ReadAhead``): the parallel
        Kineto reader's parent cuts and hands off blocks meanwhile. Nothing for a plain file or a salvaging read."""
        if isinstance(self._f, gzip.GzipFile):
            self._f = ReadAhead(self._f)

    def close(self) -> None:
        try:
            if self._f is not self._raw:
                self._f.close()
        finally:
            self._raw.close()


class GzipSalvage:
    """A gzip stream (one or more members) decompressed with zlib, handing out what decompresses up to a cut
    (the stream ends before a member's end marker) or a damaged block, then ending; ``src.cut`` says which.
    Reads at most 1 MB of compressed input and ``n`` bytes of output at a time."""

    def __init__(self, raw, src: Source):
        self._raw = raw
        self._src = src
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._in = b""
        self._fed = 0  # compressed bytes given to the decompressors
        self._member_done = False  # the last member ended cleanly and no byte of another was read yet
        self._done = False

    def read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n and not self._done:
            if not self._in:
                self._in = self._raw.read(1 << 20)
                if not self._in:
                    if not self._member_done:
                        self._src.cut = (f"the gzip stream ends at compressed byte {self._fed:,} before its end "
                                         "marker")
                    self._done = True
                    break
            if self._member_done and not self._in.strip(b"\x00"):  # zero padding after the last member
                self._in = b""
                continue
            data = self._in
            try:
                chunk = self._d.decompress(data, n - len(out))
            except zlib.error as exc:
                self._src.cut = f"the gzip data is damaged near compressed byte {self._fed:,} ({exc})"
                self._done = True
                break
            out += chunk
            if self._d.eof:
                rest = self._d.unused_data
                self._fed += len(data) - len(rest)
                self._in = rest
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._member_done = True
            else:
                rest = self._d.unconsumed_tail
                self._fed += len(data) - len(rest)
                self._in = rest
                if data:
                    self._member_done = False
        return bytes(out)

    def close(self) -> None:
        pass


class ReadAhead:
    """A file object whose blocks are read ahead by a thread (a gzip stream: zlib frees the GIL while it
    decompresses, so decompression runs beside the parent's cutting and hand-off). ``read(n)`` gives the blocks
    in order, every call with the first call's ``n``; an error reading a block is raised by the ``read`` that
    would have returned it. At most ``AHEAD`` blocks wait, so memory stays a few blocks."""

    AHEAD = 4

    def __init__(self, inner):
        import queue

        self._inner = inner
        self._queue: queue.Queue = queue.Queue(maxsize=self.AHEAD)
        self._n: int | None = None
        self._thread = None
        self._stop = False
        self._done = False

    def _start(self, n: int) -> None:
        import threading

        self._n = n
        self._thread = threading.Thread(target=self._run, name="kernelscope-gunzip", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                item = self._inner.read(self._n)
            except BaseException as exc:  # raised in order by the reader's read
                item = exc
            self._queue.put(item)
            if not isinstance(item, bytes) or not item:
                return

    def read(self, n: int) -> bytes:
        if self._done:
            return b""
        if self._thread is None:
            self._start(n)
        elif n != self._n:
            raise ValueError("a prefetched stream is read in blocks of one size")
        item = self._queue.get()
        if isinstance(item, BaseException):
            self._done = True
            raise item
        if not item:
            self._done = True
        return item

    def close(self) -> None:
        self._stop = True
        if self._thread is not None:
            while self._thread.is_alive():  # let a put waiting on a full queue through
                try:
                    self._queue.get(timeout=0.05)
                except Exception:
                    pass
        self._inner.close()
