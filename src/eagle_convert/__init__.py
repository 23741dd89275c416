"""eagle-convert: make EAGLE speculative-decoding draft heads load in serving engines, and prove they work."""

__version__ = "0.1.0"

from . import errors  # noqa: E402,F401
from .api import bench, convert, inspect  # noqa: E402,F401  (the public API, one function per command)

__all__ = ["__version__", "bench", "convert", "inspect"]
