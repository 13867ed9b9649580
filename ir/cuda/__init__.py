"""The NVIDIA GPU back end: GPU lowering, NVPTX code generation (llvmlite), PTX and cubins,
the driver-API runtime and a CPU emulator of the lowered kernels for tests."""
from ..target import register_backend
from .backend import CUDA

register_backend(CUDA)
