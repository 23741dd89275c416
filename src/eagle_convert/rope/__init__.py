"""RoPE and its scaling types, once for the whole package: the table of types (`types.py`), the schedule an engine
computes from a config (`schedule.py`), both torch-free so that the config checks run before torch loads, and the
inverse frequencies in torch (`frequencies.py`), which only the runner imports."""
