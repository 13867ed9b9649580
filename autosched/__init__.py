"""autosched: a template-free auto-scheduler for tensor programs, after Ansor.

The product layer: the operator library (``autosched.ops``) and the command line
(``autosched``). The compiler it drives is the ``ir`` package.
"""
from . import ops

__version__ = "0.1.0"
__all__ = ["ops", "__version__"]
