"""The layouts. Importing this package registers them all; `detect_priority` orders detection."""

# Each import registers its layout, in this order: LAYOUTS, the generated tables and inspect's hints list them so.
# isort: off
from . import vllm_v0, speculators, modelopt, eagle3, sglang, eagle1, vllm, mtp_vllm, mtp_sglang  # noqa: F401
from . import gguf_dflash  # noqa: F401  (registers `gguf`: EAGLE-3 from gguf.py, DFlash)
from . import dflash_zlab, speculators_dflash, openvino  # noqa: F401
# isort: on
from .base import CANONICAL_NAMES, Layout, OutputContext
from .registry import LAYOUTS, detect_layout, get_layout, output_layouts

__all__ = ["CANONICAL_NAMES", "LAYOUTS", "Layout", "OutputContext", "detect_layout", "get_layout", "output_layouts"]
