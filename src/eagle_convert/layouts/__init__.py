"""The layouts. Importing this package registers them all; `detect_priority` orders detection."""

# The import order is the registration order: LAYOUTS, the generated tables and inspect's hints list layouts so.
# isort: off
from . import vllm_v0, speculators, modelopt, eagle3, sglang, eagle1, vllm  # noqa: F401  (registers them)
# isort: on
from .base import CANONICAL_NAMES, Layout, OutputContext
from .registry import LAYOUTS, detect_layout, get_layout, output_layouts

__all__ = ["CANONICAL_NAMES", "LAYOUTS", "Layout", "OutputContext", "detect_layout", "get_layout", "output_layouts"]
