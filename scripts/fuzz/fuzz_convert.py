#!/usr/bin/env python3
"""Fuzz `eagle-convert convert` with damaged inputs: every run must refuse cleanly or convert faithfully (what a run
does and when it passes: eagle_convert.testing.fuzz). Exit status 1 if any run failed.

    python scripts/fuzz/fuzz_convert.py [--runs 1000] [--seed 0] [--only RUN] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch loads: tiny models, and a loaded machine

from eagle_convert.testing.fuzz import fuzz  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", type=int, help="replay this one run")
    ap.add_argument("--workdir", type=Path, help="where the temporary folders go (default: the system's)")
    args = ap.parse_args(argv)
    summary = fuzz(args.runs, args.seed, args.workdir, args.only)
    print(f"{summary['runs']} runs in {summary['seconds']} s (seed {args.seed}): {summary['refused']} refused, "
          f"{summary['converted']} converted faithfully, {len(summary['failures'])} failed")
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
