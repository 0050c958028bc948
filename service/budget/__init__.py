"""The memory-budget estimator: weights, KV cache, startup check and what fits (issue 3).

Pure: reads only the catalog it is given. `estimate` answers an EstimateRequest; `budget_from_facts`
builds the same request from what a diagnosis read in a log. This module's names are the budget's
public surface: other packages (fixes, diagnosis, core) import these, never the modules below.
"""

from service.budget.defaults import default_utilization, scheduler_defaults
from service.budget.overheads import OverheadTerms, activation_bytes, component_bytes
from service.budget.parallel import tensor_parallel_problem, valid_tensor_parallel_sizes
from service.budget.plan import GIB, OverheadInputs, budget_from_facts, estimate, overhead_inputs
from service.budget.resolve import find_gpu, find_model, find_quantization, in_catalog
from service.budget.startup import max_passing_utilization, passes_startup, requested_bytes
from service.budget.weights import parameter_count

__all__ = [
    "GIB",
    "activation_bytes",
    "component_bytes",
    "OverheadInputs",
    "OverheadTerms",
    "budget_from_facts",
    "default_utilization",
    "estimate",
    "find_gpu",
    "find_model",
    "find_quantization",
    "in_catalog",
    "max_passing_utilization",
    "overhead_inputs",
    "parameter_count",
    "passes_startup",
    "requested_bytes",
    "scheduler_defaults",
    "tensor_parallel_problem",
    "valid_tensor_parallel_sizes",
]
