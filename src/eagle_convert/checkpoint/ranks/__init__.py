"""Targets saved per tensor-parallel rank (vLLM / SGLang sharded_state, TensorRT-LLM checkpoints): detection
(rank_formats.py), the gather planned from headers (shards.py), the Checkpoint view (checkpoint.py) and the gather
itself (gather.py). See docs/targets.md, "Targets saved per rank"."""
