"""The gather of a per-rank tensor, planned from safetensors headers alone (pure): which shard of which rank file
gives which rows (or columns) of the whole [V, H] matrix, and every check that makes the result exact."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...errors import LayoutError, ShapeMismatchError
from ...io.safetensors import nbytes_of
from ..index import TensorRef

REEXPORT = "Re-save the target (same TP size) or export it to Hugging Face format, then convert against that."


def pad64(v: int) -> int:
    return -(-v // 64) * 64  # vLLM's pad_vocab_size with DEFAULT_VOCAB_PADDING_SIZE


@dataclass(frozen=True)
class Gathered:
    """A whole [V, H] tensor that exists only as per-rank shards: concat(shards, dim)[:V] along dim 0. Stands where
    a TensorRef would (name, dtype, shape); `leaves()` are the byte ranges actually read."""
    name: str  # the shards' name in the rank files
    shards: tuple[TensorRef, ...]  # in rank order
    dim: int  # 0: vocab-sharded rows; 1: hidden-sharded columns (TRT-LLM embedding_sharding_dim 1)
    shape: tuple[int, int]  # the whole matrix: [V, H]
    stage: str = ""  # e.g. "pp stage 1 of 2", for messages and provenance

    offset = None  # not one range of one file; see leaves()

    @property
    def dtype(self) -> torch.dtype:
        return self.shards[0].dtype

    @property
    def file(self) -> str:
        return self.shards[0].file

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.dtype, self.shape)

    @property
    def tp(self) -> int:
        return len(self.shards)

    def leaves(self) -> tuple[TensorRef, ...]:
        return self.shards

    def how(self) -> str:
        stage = f" ({self.stage})" if self.stage else ""
        if self.dim == 0:
            return f"gather tp={self.tp} dim 0{stage}, rows [0, {self.shape[0]})"
        return f"gather tp={self.tp} dim 1{stage}, columns [0, {self.shape[1]})"

    def describe(self) -> str:
        files = self.shards[0].file if self.tp == 1 else f"{self.shards[0].file} .. {self.shards[-1].file}"
        return f"{self.how()} of target {files}:{self.name}"

    def row_pieces(self, row: int) -> list[tuple[TensorRef, int]]:
        """(shard, row in that shard) pieces that make up `row` of the whole matrix, in column order."""
        if self.dim == 1:
            return [(s, row) for s in self.shards]
        start = 0
        for s in self.shards:
            if row < start + s.shape[0]:
                return [(s, row - start)]
            start += s.shape[0]
        raise IndexError(row)


def check_head_entries(name: str, refs: dict[str, TensorRef], quantized_suffixes: tuple[str, ...], where: str) -> None:
    """Refuse a head stored as anything but one float matrix: packed/quantized siblings, or an integer dtype."""
    stem = name.removesuffix(".weight")
    extra = sorted(n for n in refs if n.startswith(stem + ".") and n != name
                   and n.removeprefix(stem + ".") in quantized_suffixes)
    if extra:
        raise LayoutError(f"{where} stores {stem} with {', '.join(extra)} beside {name}: a quantized or packed head "
                          "(or one with a bias), which a splice of the plain [V, H] matrix cannot reproduce.",
                          "Save the target with an unquantized LM head (vLLM: serve it without quantization when "
                          "saving), or export it to Hugging Face format.")
    ref = refs.get(name)
    if ref is not None and not ref.dtype.is_floating_point:
        raise LayoutError(f"{where} stores {name} as {str(ref.dtype).removeprefix('torch.')}: a quantized head.",
                          "Save the target with an unquantized (float) LM head, or export it to Hugging Face format.")


def plan_gather(name: str, shards: list[TensorRef], *, vocab: int, hidden: int, padding: str, dim: int,
                label: str, stage: str = "") -> Gathered:
    """Check the shards against the config and the format's padding rule; the plan of their gather.

    padding "pad64" (vLLM/SGLang): every shard [pad64(V)/tp, H]. "tp" (TRT-LLM): every shard [ceil(V/tp), H]; a
    TRT-LLM embedding split by torch.chunk without padding may have a shorter last shard ("tp-chunk")."""
    tp = len(shards)
    shapes = [s.shape for s in shards]
    where = f"the per-rank target {label}"
    if any(len(s) != 2 for s in shapes):
        raise ShapeMismatchError(f"{name} in {where} is not a matrix (shapes {shapes}).", REEXPORT)
    dtypes = {s.dtype for s in shards}
    if len(dtypes) != 1:
        raise LayoutError(f"The {tp} shards of {name} in {where} have different dtypes "
                          f"({', '.join(sorted(str(d).removeprefix('torch.') for d in dtypes))}).", REEXPORT)
    if dim == 1:
        return _plan_columns(name, shards, vocab, hidden, where, stage)
    if padding == "pad64" and pad64(vocab) % tp:
        raise ShapeMismatchError(f"{where} has {tp} ranks, which do not divide the padded vocabulary pad64({vocab}) "
                                 f"= {pad64(vocab)}: vLLM cannot have saved it.", REEXPORT)
    rows = shapes[0][0]
    ragged = padding == "tp-chunk" and all(s == shapes[0] for s in shapes[:-1]) and 0 < shapes[-1][0] <= rows \
        and shapes[-1][1] == shapes[0][1]
    if not ragged and any(s != shapes[0] for s in shapes):
        raise ShapeMismatchError(f"The shards of {name} in {where} have different shapes ({_ranks(shapes)}): every "
                                 "rank must hold an equal slice.", REEXPORT)
    if shapes[0][1] != hidden:
        raise ShapeMismatchError(f"{name} in {where} has {shapes[0][1]} columns per rank, but the config's "
                                 f"hidden_size is {hidden}.", "The config.json does not belong to these rank files; "
                                 "restore the config.json of the model that was saved.")
    expected = pad64(vocab) // tp if padding == "pad64" else -(-vocab // tp)
    if rows != expected:
        rule = (f"{tp} x {rows} = {tp * rows} rows, but pad64(vocab_size {vocab}) = {pad64(vocab)}"
                if padding == "pad64" else f"{rows} rows per rank, but ceil(vocab_size {vocab} / tp {tp}) = {expected}")
        raise ShapeMismatchError(f"The shards of {name} in {where} hold {rule}: the rank files and the config "
                                 "disagree about the vocabulary (added tokens, LoRA extra vocab, or another model's "
                                 "config).", "Restore the config.json of the model that was saved, or re-save it.")
    total = sum(s[0] for s in shapes)
    if total < vocab:
        raise ShapeMismatchError(f"The shards of {name} in {where} hold {total} rows, fewer than the vocabulary "
                                 f"({vocab}).", REEXPORT)
    return Gathered(name, tuple(shards), 0, (vocab, hidden), stage)


def _plan_columns(name, shards, vocab, hidden, where, stage) -> Gathered:
    shapes = [s.shape for s in shards]
    if any(s != shapes[0] for s in shapes) or shapes[0][0] != vocab or shapes[0][1] * len(shards) != hidden:
        raise ShapeMismatchError(f"The shards of {name} in {where} are {_ranks(shapes)}; split on dim 1 "
                                 f"(embedding_sharding_dim 1) they must each be [{vocab}, {hidden}/{len(shards)}].",
                                 REEXPORT)
    return Gathered(name, tuple(shards), 1, (vocab, hidden), stage)


def _ranks(shapes) -> str:
    return ", ".join(f"rank {r}: {list(s)}" for r, s in enumerate(shapes))
