"""The element types autosched knows, and how they map to numpy and LLVM."""
from __future__ import annotations

import numpy as np

FLOAT_TYPES = ("float32", "float64")
INT_TYPES = ("int8", "int16", "int32", "int64", "uint8")
ALL_TYPES = FLOAT_TYPES + INT_TYPES + ("bool",)

_LLVM = {"float32": "float", "float64": "double", "int8": "i8", "int16": "i16", "int32": "i32",
         "int64": "i64", "uint8": "i8", "bool": "i1"}
_BYTES = {"float32": 4, "float64": 8, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "bool": 1}

#: dtype of every loop variable and index expression (64-bit so that large tensors index safely)
INDEX = "int64"


def canonical(dtype) -> str:
    """Normalise a dtype given as a string, numpy dtype or Python type to its canonical name."""
    if isinstance(dtype, str) and dtype in ALL_TYPES:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in ALL_TYPES:
        raise TypeError(f"unsupported dtype {dtype!r}; expected one of {', '.join(ALL_TYPES)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_TYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_TYPES


def is_unsigned(dtype: str) -> bool:
    return dtype == "uint8"


def llvm_type(dtype: str) -> str:
    return _LLVM[dtype]


def storage_llvm_type(dtype: str) -> str:
    """Booleans are stored one byte each (numpy's layout) but computed as i1."""
    return "i8" if dtype == "bool" else _LLVM[dtype]


def itemsize(dtype: str) -> int:
    return _BYTES[dtype]

