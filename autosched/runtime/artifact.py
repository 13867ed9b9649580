"""The artifact file: a shared library, the weights and a manifest, in one file.

Layout (little-endian; ``autosched/deploy/loader.c`` reads the same)::

    [shared library (ELF)][padding to a page][weights][manifest (JSON)][trailer]

The library comes first so that the file is itself the library (dlopen maps only its ELF
segments); the weights start on a page so that they can be mapped (or read), never unpickled; the
trailer at the end says where everything is, so that a truncated file has none. Everything
here is read with bounded sizes before any native code of the file is loaded.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass

#: the file layout's version: a loader reads its own format only
FORMAT = 1
MAGIC = b"ASOTRAIL"
_TRAILER = struct.Struct("<8sII5Q16s")
TRAILER_BYTES = _TRAILER.size
PAGE = 4096
#: a manifest larger than this is not one of ours (it holds names, shapes and records)
MAX_MANIFEST_BYTES = 256 << 20


class ArtifactError(ValueError):
    """The file is not an artifact this runtime can load: truncated, damaged, another kind of
    file, another format or autosched version, or code for another CPU."""


@dataclass(frozen=True)
class Sections:
    """Where the parts of an artifact lie in its file."""
    library_bytes: int
    weights_offset: int
    weights_bytes: int
    manifest_offset: int
    manifest_bytes: int
    build_id: bytes


def write(path: str, library: bytes, weights: bytes, manifest: dict, build_id: bytes) -> None:
    """Write an artifact to ``path`` atomically (a new file renamed over the old one: a
    process that has the old one loaded keeps its mapping)."""
    weights_offset = -(-len(library) // PAGE) * PAGE
    manifest_bytes = json.dumps(manifest, indent=1).encode()
    manifest_offset = weights_offset + len(weights)
    trailer = _TRAILER.pack(MAGIC, FORMAT, 0, len(library), weights_offset, len(weights), manifest_offset,
                            len(manifest_bytes), build_id)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(library)
            f.write(b"\0" * (weights_offset - len(library)))
            f.write(weights)
            f.write(manifest_bytes)
            f.write(trailer)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_sections(path: str) -> Sections:
    """The trailer of the artifact at ``path``, checked against the file's size."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(4)
            if size >= TRAILER_BYTES:
                f.seek(size - TRAILER_BYTES)
            tail = f.read(TRAILER_BYTES)
    except OSError as err:
        raise ArtifactError(f"cannot read the artifact {path!r}: {err.strerror or err}") from None
    if len(tail) != TRAILER_BYTES or tail[:8] != MAGIC:
        kind = "a shared library but no autosched artifact" if head == b"\x7fELF" else "not an autosched artifact"
        raise ArtifactError(f"{path!r} is {kind}, or a truncated one: it has no artifact trailer at its end "
                            f"(expected a file written by `autosched compile`)")
    _, fmt, _, lib, w_off, w_bytes, m_off, m_bytes, build_id = _TRAILER.unpack(tail)
    if fmt != FORMAT:
        raise ArtifactError(f"{path!r} is an artifact of format {fmt}; this runtime reads format {FORMAT}: "
                            f"compile the model again with this autosched")
    body = size - TRAILER_BYTES
    if not (head == b"\x7fELF" and lib <= w_off <= body and w_off % PAGE == 0 and w_bytes <= body - w_off
            and m_off <= body and m_bytes <= min(body - m_off, MAX_MANIFEST_BYTES)):
        raise ArtifactError(f"{path!r} is damaged: its sections do not fit in its {size} bytes")
    return Sections(lib, w_off, w_bytes, m_off, m_bytes, build_id)


def read_manifest(path: str, sections: Sections | None = None) -> dict:
    """The manifest of the artifact at ``path`` (a dict), after checking the file's layout."""
    sections = sections or read_sections(path)
    with open(path, "rb") as f:
        f.seek(sections.manifest_offset)
        data = f.read(sections.manifest_bytes)
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ArtifactError(f"{path!r} is damaged: its manifest is not JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArtifactError(f"{path!r} is damaged: its manifest is not an artifact manifest of format {FORMAT}")
    return manifest


def check_library(path: str, sections: Sections, manifest: dict) -> None:
    """That the library bytes are the ones the compiler wrote (their CRC-32), so that a damaged
    file is an error here rather than a crash of the dynamic loader."""
    with open(path, "rb") as f:
        crc = zlib.crc32(f.read(sections.library_bytes))
    if crc != manifest.get("library", {}).get("crc32"):
        raise ArtifactError(f"{path!r} is damaged: its library's checksum is {crc:#010x}, the manifest says "
                            f"{manifest.get('library', {}).get('crc32')!r}")
