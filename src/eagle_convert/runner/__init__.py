"""The bundled draft/verify runner: a compact Llama-family target, EAGLE-1/EAGLE-3 heads, chain speculative decoding
and acceptance metrics. `bench.run_bench` is the entry point that does I/O; everything else is pure tensor code."""

from eagle_convert.runner.bench import BenchReport, PromptReport, run_bench
from eagle_convert.runner.chat import ChatTokenizer
from eagle_convert.runner.heads import DraftHead, DraftOutput, Eagle1Head, Eagle3Head, aux_layer_ids_for, build_draft_head
from eagle_convert.runner.metrics import AcceptanceStats, merge_stats
from eagle_convert.runner.model import SUPPORTED_ARCHITECTURES, TargetConfig, TargetModel, TargetOutput
from eagle_convert.runner.prompts import BUILTIN_PROMPTS, Prompt, load_prompts
from eagle_convert.runner.speculate import SpeculativeResult, plain_generate, speculative_generate

__all__ = [
    "BUILTIN_PROMPTS", "BenchReport", "ChatTokenizer", "Prompt", "PromptReport", "load_prompts", "run_bench",
    "AcceptanceStats", "DraftHead", "DraftOutput", "Eagle1Head", "Eagle3Head", "SUPPORTED_ARCHITECTURES",
    "SpeculativeResult", "TargetConfig", "TargetModel", "TargetOutput", "aux_layer_ids_for", "build_draft_head",
    "merge_stats", "plain_generate", "speculative_generate",
]
