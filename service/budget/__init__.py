"""The memory-budget estimator: weights, KV cache, startup check and what fits (issue 3).

Pure: reads only the catalog it is given. `estimate` answers an EstimateRequest; `budget_from_facts`
builds the same request from what a diagnosis read in a log.
"""

from service.budget.plan import GIB, budget_from_facts, estimate
from service.budget.weights import parameter_count

__all__ = ["GIB", "budget_from_facts", "estimate", "parameter_count"]
