"""eagle-convert: make EAGLE speculative-decoding draft heads load in serving engines, and prove they work."""

__version__ = "0.1.0"

__all__ = ["__version__", "bench", "convert", "extract_mtp", "inspect"]


def __getattr__(name: str):
    # The public API (one function per command) loads on first use: importing torch takes ~1.5 s, and the CLI
    # starts reading the draft from disk before it does.
    if name in ("bench", "convert", "extract_mtp", "inspect", "errors"):
        import importlib

        module = importlib.import_module(".errors" if name == "errors" else ".api", __name__)
        return module if name == "errors" else getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
