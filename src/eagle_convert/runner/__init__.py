"""The bundled draft/verify runner: pure tensor code. A Llama-family target model (model.py, layers.py, moe_mlp.py;
which architectures it runs: architectures.py, from the target families), EAGLE-1/EAGLE-3 heads (heads.py), chain
speculative decoding (speculate.py), draft trees (trees/) and acceptance statistics (metrics.py). It reads weights
through a `get_tensor(name)` callable and does no other I/O; benchmark/ drives it."""
