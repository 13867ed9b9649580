"""Reading files a user may have received (tuning logs, the records database, base models,
ONNX models, ``.npy`` inputs) with bounds: regular files only (a device such as
``/dev/full`` reads forever, a FIFO blocks), and at most a given size, checked before a
byte is read. Each kind of file has its cap here, in one place."""
from __future__ import annotations

import os
import stat

#: the largest tuning log or records database read (a million records are ~600 MB)
MAX_RECORDS_FILE_BYTES = 1 << 30
#: the longest line of one (a record of a few hundred steps is a few kB)
MAX_RECORD_LINE_BYTES = 1 << 20
#: the largest base cost model (the shipped one is ~1 MB)
MAX_BASE_MODEL_BYTES = 256 << 20
#: the largest program library (the shipped ones are a few hundred kB)
MAX_LIBRARY_BYTES = 64 << 20
#: the largest ONNX model file (protobuf's own limit for one message is 2 GiB)
MAX_MODEL_BYTES = 2 << 30
#: the largest ``.npy`` input
MAX_INPUT_BYTES = 4 << 30


class UnreadableFile(ValueError):
    """A file given to read is not a regular file, or is over its size cap."""


def checked_size(path, what: str, limit: int) -> int:
    """The size of ``path``, a regular file of at most ``limit`` bytes (``what`` names it in
    the error); ``FileNotFoundError`` when there is none, ``UnreadableFile`` otherwise."""
    path = os.fspath(path)
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        kind = ("a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO" if stat.S_ISFIFO(info.st_mode)
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else "a socket" if stat.S_ISSOCK(info.st_mode) else "not a regular file")
        raise UnreadableFile(f"the {what} {path!r} is {kind}; expected a regular file")
    if info.st_size > limit:
        cap = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"
        raise UnreadableFile(f"the {what} {path!r} is {info.st_size} bytes, over the {cap} a {what} may have")
    return info.st_size


def read_bounded(path, what: str, limit: int) -> bytes:
    """The bytes of ``path`` after ``checked_size``; never more than ``limit`` (a file that
    grows while read is cut there)."""
    checked_size(path, what, limit)
    with open(path, "rb") as f:
        return f.read(limit)


#: what turns a file option off ("off", or none at all)
OFF = ("off", "none", "0", "")


def chosen_file(spec, env_var: str, default, what: str, make: str) -> str | None:
    """The file ``spec`` names: "default" (``$env_var``, else ``default()``: a shipped file,
    or None), a path, or None/"off" (none); ``FileNotFoundError`` saying how to ``make`` one
    (a command) when the named file does not exist."""
    if spec == "default":
        spec = os.environ.get(env_var)
        if spec is None:
            spec = default()
    if spec is None or (isinstance(spec, str) and spec.strip().lower() in OFF):
        return None
    path = os.fspath(spec)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {what} at {path!r} (make one with `{make}`, or set {env_var}=off)")
    return path
