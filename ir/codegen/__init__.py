"""Code generation, one module per target: ``cpu`` (LLVM IR for the host CPU, vector code,
OpenMP). What several targets share belongs here beside them."""
from .cpu import generate

__all__ = ["generate"]
