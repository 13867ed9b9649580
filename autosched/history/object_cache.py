"""The compiled-kernel cache: the object code of every kernel a model's executor compiles,
kept beside the records database so that the next load of the model does no LLVM work.

Where: the folder ``autosched-kernels`` beside the records database
(``~/.cache/autosched/autosched-kernels/`` by default); none when the database is off.
One file per kernel, named by its key (``ir.cpu.object_key``: everything that decides the
machine code, the compiler's own source included), holding a header (a magic, the format
version, the payload's length, the key, the payload's SHA-256) and the object code.

Safe to share and to lose: a file is written to a temporary name and renamed, so that
concurrent processes and a kill never leave half a file under an entry's name; a file is
read only if regular and under ``MAX_ENTRY_BYTES``, and its header and checksum are
checked before LLVM sees a byte (LLVM aborts the process on a bad object file): a
damaged, truncated or foreign file is a miss, and the kernel compiled instead replaces it.
The folder is kept under ``max_bytes`` (``DEFAULT_MAX_BYTES``, or
``$AUTOSCHED_KERNEL_CACHE_MB``) by deleting the least recently used entries; a failure to
write (permissions, a full disk) costs one warning, and kernels are then compiled as if
there were no cache.
"""
from __future__ import annotations

import hashlib
import os
import re
import struct
import tempfile
import time
import warnings
from collections import Counter

from ..files import UnreadableFile, read_bounded
from .database import RecordsDB, records_db_path

FOLDER_NAME = "autosched-kernels"
#: the cap on the folder's size, and the environment variable that changes it (MiB; 0: off)
DEFAULT_MAX_BYTES = 512 << 20
ENV_VAR = "AUTOSCHED_KERNEL_CACHE_MB"
#: the largest entry read (a kernel's object code is tens of kB)
MAX_ENTRY_BYTES = 64 << 20
FORMAT_VERSION = 1
MAGIC = b"autosched kernel object\n"
_HEADER = struct.Struct(f"<{len(MAGIC)}sIQ32s32s")   # magic, version, payload bytes, key, sha256
_ENTRY = re.compile(r"[0-9a-f]{64}\.o\Z")
_TEMP_PREFIX = ".tmp-"
#: a temporary file older than this was left by a killed process
_STALE_TEMP_SECONDS = 3600


def _entry_bytes(key: str, data: bytes) -> bytes:
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(data), bytes.fromhex(key), hashlib.sha256(data).digest()) + data


def _payload(blob: bytes, key: str) -> bytes | None:
    """The object code in ``blob`` if it is a whole, intact entry of ``key``, else None."""
    if len(blob) < _HEADER.size:
        return None
    magic, version, size, stored_key, digest = _HEADER.unpack_from(blob)
    data = blob[_HEADER.size:]
    if (magic != MAGIC or version != FORMAT_VERSION or size != len(data) or stored_key != bytes.fromhex(key)
            or hashlib.sha256(data).digest() != digest):
        return None
    return data


class ObjectCache:
    """The compiled kernels in ``folder`` (made at the first write), at most ``max_bytes``
    of them: an ``ir.cpu.object_key.ObjectStore`` for ``ir.build(..., objects=)``.
    ``stats`` counts ``hits``, ``misses`` (``damaged``: entries that failed their check),
    ``stored`` and ``evicted`` entries."""

    def __init__(self, folder, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes <= 0:
            raise ValueError(f"the compiled-kernel cache's cap must be positive, got {max_bytes} bytes")
        self.folder = os.fspath(folder)
        self.max_bytes = max_bytes
        self.stats: Counter = Counter()
        self.failed: str | None = None
        self._size: int | None = None   # the folder's bytes as last counted, plus what we wrote since

    def __repr__(self) -> str:
        return f"ObjectCache({self.folder!r}, max_bytes={self.max_bytes})"

    def _path(self, key: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{64}", key):
            raise ValueError(f"a compiled-kernel cache key is 64 lowercase hex digits, got {key!r}")
        return os.path.join(self.folder, key + ".o")

    def get(self, key: str) -> bytes | None:
        """The object code stored under ``key``, or None (absent, unreadable or damaged)."""
        path = self._path(key)
        try:
            data = _payload(read_bounded(path, "compiled-kernel cache entry", MAX_ENTRY_BYTES), key)
        except (OSError, UnreadableFile):
            data = None
        if data is None:
            self.stats["misses"] += 1
            if os.path.lexists(path):
                self.stats["damaged"] += 1
            return None
        self.stats["hits"] += 1
        try:
            os.utime(path)   # recently used: evicted last
        except OSError:
            pass
        return data

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` (replacing what is there), then evict the least
        recently used entries while the folder is over its cap."""
        if self.failed is not None:
            return
        path, entry, temp = self._path(key), _entry_bytes(key, data), None
        try:
            os.makedirs(self.folder, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=self.folder)
            with os.fdopen(fd, "wb") as f:
                f.write(entry)
            os.replace(temp, path)
        except OSError as err:
            if temp is not None:
                self._remove(temp)
            self.failed = f"{type(err).__name__}: {err}"
            warnings.warn(f"autosched: the compiled-kernel cache {self.folder!r} cannot be written "
                          f"({str(err)[:300]}); kernels are compiled without it", RuntimeWarning, stacklevel=2)
            return
        self.stats["stored"] += 1
        if self._size is not None:
            self._size += len(entry)
        if self._size is None or self._size > self.max_bytes:
            try:
                self._evict()
            except OSError:   # (the folder went away meanwhile: nothing to evict)
                self._size = None

    def _evict(self) -> None:
        """Count the folder's entries and delete the least recently used while over the cap
        (and temporary files a killed writer left)."""
        entries, now = [], time.time()
        with os.scandir(self.folder) as listing:
            for item in listing:
                try:
                    info = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if _ENTRY.match(item.name):
                    entries.append((info.st_mtime, info.st_size, item.path))
                elif item.name.startswith(_TEMP_PREFIX) and now - info.st_mtime > _STALE_TEMP_SECONDS:
                    self._remove(item.path)
        entries.sort()
        size = sum(s for _, s, _ in entries)
        for _, entry_size, path in entries:
            if size <= self.max_bytes:
                break
            if self._remove(path):
                self.stats["evicted"] += 1
            size -= entry_size
        self._size = size

    @staticmethod
    def _remove(path: str) -> bool:
        try:
            os.unlink(path)
            return True
        except OSError:   # (another process removed it first)
            return False


def max_bytes_from_env() -> int:
    """The cap ``$AUTOSCHED_KERNEL_CACHE_MB`` sets (MiB), else ``DEFAULT_MAX_BYTES``; 0 is off."""
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        mib = float(text)
    except ValueError:
        mib = -1.0
    if not mib >= 0:
        raise ValueError(f"{ENV_VAR}={text!r}: expected the compiled-kernel cache's cap in MiB, a number >= 0 "
                         "(0 turns it off)")
    return int(mib * (1 << 20))


def object_cache(records_db="default") -> ObjectCache | None:
    """The compiled-kernel cache beside the records database ``records_db`` names
    (``database.records_db_path``: "default", a path, None/"off", or a ``RecordsDB``); None when the
    database is off or the cap is 0."""
    path = records_db.path if isinstance(records_db, RecordsDB) else records_db_path(records_db)
    max_bytes = max_bytes_from_env()
    if path is None or max_bytes == 0:
        return None
    return ObjectCache(os.path.join(os.path.dirname(os.path.abspath(path)), FOLDER_NAME), max_bytes)
