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
from .lower_gpu import lower_gpu, GPUProgram
from .codegen import generate
from .runtime import Kernel, TimeResult
from .cuda_runtime import CudaKernel, NoCudaDevice
from .build import build
from .task import SearchTask, HardwareParams, host_target, target_kind
