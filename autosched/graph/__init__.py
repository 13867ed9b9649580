"""Networks: a small graph IR of operator nodes (``Graph``, ``GraphBuilder``), a partitioner
that fuses them into subgraph tasks as Relay does (``partition``), a model zoo with random
weights (``zoo``: ResNet-50, MobileNet-V2, 3D-ResNet-18, DCGAN, BERT-base) and an executor
that runs a whole network from its tuned kernels (``GraphExecutor``) beside a numpy
reference (``run_reference``), and models from ONNX files (``from_onnx``; the ``onnx``
package is imported only when it is called; models with open axes run through a
``DynamicExecutor``), and PyTorch modules through PyTorch's ONNX exporters (``from_torch``)."""
from ..ops.registry import ANCHOR, BROADCAST, ELEMWISE, INJECTIVE, OPDEFS, PATTERN_NAMES, REDUCE, OpDef, opdef
from .graph import Graph, GraphBuilder, Node, constant, normal, topological_order, uniform
from .passes import fold_batch_norm
from .partition import PartitionedGraph, Subgraph, Workload, partition, subgraph_dag
from .executor import GraphExecutor, default_schedule, run_reference
from .zoo import NETWORKS, bert, dcgan, get_network, mobilenet_v2, network_names, resnet3d_18, resnet50
from .dynamic import DynamicExecutor, DynamicModel
from .onnx import UnsupportedModelError, from_onnx
from .torch_import import from_torch

__all__ = ["ANCHOR", "BROADCAST", "ELEMWISE", "INJECTIVE", "OPDEFS", "PATTERN_NAMES", "REDUCE", "OpDef", "opdef",
           "Graph", "GraphBuilder", "Node", "constant", "normal", "topological_order", "uniform",
           "fold_batch_norm", "PartitionedGraph", "Subgraph", "Workload", "partition", "subgraph_dag",
           "GraphExecutor", "default_schedule", "run_reference",
           "NETWORKS", "bert", "dcgan", "get_network", "mobilenet_v2", "network_names", "resnet3d_18", "resnet50",
           "UnsupportedModelError", "from_onnx", "DynamicModel", "DynamicExecutor",
           "from_torch"]
