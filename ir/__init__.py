"""autosched's language and compiler: tensor expressions, ComputeDAG, States, lowering, codegen."""
from .dtype import INDEX
from .expr import (Expr, Var, IterVar, Const, Reduce, TensorRead, const, cast, select, all_of,
                   sum, max, min, exp, log, sqrt, rsqrt, tanh, sigmoid, erf, abs, pow, floor, ceil,
                   max_value, min_value)
from .tensor import Tensor, Operation, PlaceholderOp, ComputeOp, placeholder, compute, reduce_axis
from .simplify import simplify
from .dag import ComputeDAG
from .index_check import IndexOutOfRange
from .state import State
from .stage import Stage
from .loops import InvalidStep, Iterator
from . import steps
from .steps import Step
from .loop_ir import Buffer
from .lower import lower, LoweredFunc
from .backend import Backend, TimeResult
from .target import Target, HardwareParams, register_backend
from . import cpu, cuda  # noqa: F401 - the back ends register themselves
from .cpu.runtime import Kernel
from .cuda.lower import lower_gpu, GPUProgram
from .cuda.runtime import CudaKernel, NoCudaDevice
from .build import build
from .task import SearchTask, host_target
