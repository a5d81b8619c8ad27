"""Models as data: the public names of the model layer, in one place.

Model files are YAML (parsed with ``yaml.safe_load``; expressions with
:mod:`addrsim.model.parse`, never evaluated).  The built-in files live in the project's
``models/`` folder (``layouts.yaml``, ``fmha_bwd_v3.yaml``, ``host_*.yaml``); users add theirs
with ``--model FILE``: a later file's layouts, contracts and families are consulted first.

Where each idea lives: :mod:`addrsim.model.schema` (reading and validating the files: the
ModelSet), :mod:`addrsim.model.layout` (a layout as a value), :mod:`addrsim.model.hosts`
(which family, host and argument contract describe a kernel), :mod:`addrsim.model.problem`
(one kernel in one layout: shape symbols, kernel arguments, the domain's layers and the
expected offsets).  This module re-exports them; it defines nothing.
"""
from addrsim.model.hosts import (arg_layout, buffer_pointer, choose_contract, choose_family, choose_host,  # noqa: F401
                                 grid_symbols, pointer_args)
from addrsim.model.layout import Layout  # noqa: F401
from addrsim.model.problem import KERNEL_LAYERS, STRIDE_NAMES, Assumption, Problem, build_problem  # noqa: F401
from addrsim.model.schema import (BUILTIN_DIR, SHAPE_VARS, TENSORS, ModelSet, check_bounds, layout_of,  # noqa: F401
                                  layout_strides, load_models)

__all__ = ["arg_layout", "buffer_pointer", "choose_contract", "choose_family", "choose_host", "grid_symbols",
           "pointer_args", "Layout", "KERNEL_LAYERS", "STRIDE_NAMES", "Assumption", "Problem", "build_problem",
           "BUILTIN_DIR", "SHAPE_VARS", "TENSORS", "ModelSet", "check_bounds", "layout_of", "layout_strides",
           "load_models"]
