"""The host CPU back end: LLVM IR for this CPU (vector code, OpenMP), JIT or object code."""
from ..target import register_backend
from .backend import CPU

register_backend(CPU)
