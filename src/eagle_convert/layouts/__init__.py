"""The layouts. Importing this package registers them all; `detect_priority` orders detection."""

from . import eagle1, eagle3, modelopt, sglang, speculators, vllm, vllm_v0  # noqa: F401  (registers them)
from .base import CANONICAL_NAMES, Layout, OutputContext
from .registry import LAYOUTS, detect_layout, get_layout, output_layouts

__all__ = ["CANONICAL_NAMES", "LAYOUTS", "Layout", "OutputContext", "detect_layout", "get_layout", "output_layouts"]
