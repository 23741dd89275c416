"""The Python API: one function per CLI command. The CLI is a thin shell over these."""

from __future__ import annotations

from .conversion.converter import ConversionResult, convert
from .inspection.report import InspectReport, inspect
from .mtp.extract import MtpResult, MtpSettings, extract_mtp


def bench(*args, **kwargs):
    """Run the draft/verify benchmark (our runner, or an engine); see `eagle_convert.benchmark.api.bench` for the
    arguments."""
    from .benchmark.api import bench as _bench  # torch model code loads only when benchmarking

    return _bench(*args, **kwargs)


__all__ = ["ConversionResult", "InspectReport", "MtpResult", "MtpSettings", "bench", "convert", "extract_mtp",
           "inspect"]
