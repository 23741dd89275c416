"""The command line: click only (parse, call the library, render, map errors)."""

from .main import main

__all__ = ["main"]
