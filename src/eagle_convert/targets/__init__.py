"""Target families as data (one table per family group) and the lookup from a checkpoint's config to its family."""

from .family import CAUSAL_LM, RUNNER_DENSE, RUNNER_MOE, Naming, TargetFamily
from .family_registry import FAMILIES, family_for, family_names

__all__ = ["CAUSAL_LM", "FAMILIES", "Naming", "RUNNER_DENSE", "RUNNER_MOE", "TargetFamily", "family_for",
           "family_names"]
