"""The conversion plan: a frozen, printable list of output tensors and where each comes from. Building it reads only
configs and headers; executing it (execute.py) is the only part that touches tensor data. `build_plan` plans an EAGLE
head from a draft and its target; mtp_plan.py plans the MTP layers inside a target into the same `Plan`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import torch

from ..checkpoint.index import TensorRef
from ..checkpoint.ranks.shards import Gathered
from ..draft.load import DraftHead
from ..errors import UnsupportedConversionError, option
from ..io.safetensors import SAFETENSORS_CODES, nbytes_of
from ..layouts import OutputContext, get_layout
from ..layouts.base import DerivedTensor, Rewrite, TargetVocabulary
from ..spec import DraftSpec
from ..targets.quant import StoredWeight
from ..targets.target_info import DTYPE_NAMES, TargetInfo

FOLD = "fold_fc_bias"  # E' = E + W_e^-1 b: the fc bias moved into a draft-specific embedding
ZEROS = "zeros"
GATHER = "gather"  # concat of a per-rank target's shards, padding rows removed (ranks/)
DEQUANT = "dequantize_fp8"  # a target's FP8 LM head / embedding times its scale (targets/quant.py)


class Source(NamedTuple):
    origin: str  # "draft" or "target": which checkpoint `ref` belongs to
    ref: TensorRef | Gathered  # a Gathered reads one range per rank: its leaves()


@dataclass(frozen=True)
class PlannedTensor:
    name: str  # in the output
    role: str  # canonical name
    origin: str  # "draft", "target" or "derived"
    sources: tuple[Source, ...]  # what is read to produce it (one, except for derived tensors)
    dtype: torch.dtype
    shape: tuple[int, ...]
    derive: str | None = None  # FOLD or ZEROS for derived tensors; GATHER for a per-rank target's tensor; DEQUANT
    dequant: StoredWeight | None = None  # DEQUANT: the codes, their scale and its layout
    rewrite: Rewrite | None = None  # how the layout changes the values on the way out (layouts/gguf.py)

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.dtype, self.shape)

    def reads(self) -> list[dict]:
        """Every byte range read to produce it: [offset, offset + bytes) of each file."""
        return [{"origin": origin, "file": leaf.file, "name": leaf.name, "offset": leaf.offset, "bytes": leaf.nbytes}
                for origin, ref in self.sources for leaf in ref.leaves()]

    def describe_source(self) -> str:
        source = self._source()
        return f"{source}, then {self.rewrite.how}" if self.rewrite else source

    def _source(self) -> str:
        if self.derive == ZEROS:
            return "zeros"
        if self.derive == GATHER:
            return self.sources[0].ref.describe()
        if self.derive == DEQUANT:
            codes, scale = self.sources
            return f"{DEQUANT}(target {codes.ref.file}:{codes.ref.name} x {scale.ref.file}:{scale.ref.name}, " \
                   f"{self.dequant.scheme})"
        srcs = " + ".join(f"{origin} {ref.file}:{ref.name}" for origin, ref in self.sources)
        return f"{FOLD}({srcs})" if self.derive == FOLD else srcs


@dataclass(frozen=True)
class Plan:
    layout: str
    spec: DraftSpec | None  # None: MTP layers extracted from their target (built by the engine from its config)
    config: dict
    tensors: tuple[PlannedTensor, ...]
    dropped: tuple[tuple[str, str], ...]  # (name, why)
    notes: tuple[str, ...]
    serve_command: str
    dtype_name: str
    warnings: tuple[str, ...] = field(default=())
    # What a head extracted from its target (mtp_plan.py) writes beside its tensors:
    config_bytes: bytes | None = None  # config.json byte for byte (vLLM's MTP: the target's own), instead of `config`
    single_file: str | None = None  # one named weights file and an index of only its weight_map (SGLang's NextN)
    side_files: tuple[str, ...] = ()  # the target's files copied as they are (tokenizer, remote code)
    record: dict = field(default_factory=dict)  # sections of its own in eagle_convert.json (MTP: the layers found)
    model_card: bool = True  # a README.md beside the head (not for the target's own MTP layers)
    gguf_file: str | None = None  # one GGUF file (metadata: `config`) instead of safetensors and config.json
    ir_export: object | None = None  # layouts/openvino.IrExport: the written head then exported to OpenVINO IR

    def bytes_read(self) -> dict[str, int]:
        """Bytes of tensor data read from each input (a tensor read twice counts once)."""
        unique = {(origin, leaf.file, leaf.name): leaf.nbytes for t in self.tensors for origin, ref in t.sources
                  for leaf in ref.leaves()}
        totals = {"draft": 0, "target": 0}
        for (origin, _, _), n in unique.items():
            totals[origin] += n
        return totals

    def to_dict(self) -> dict:
        return {
            "layout": self.layout,
            "kind": self.spec.kind,
            "dtype": self.dtype_name,
            "config": self.config,
            "tensors": [{"name": t.name, "source": t.describe_source(), "origin": t.origin,
                         "dtype": SAFETENSORS_CODES[t.dtype], "shape": list(t.shape), "bytes": t.nbytes,
                         **({"reads": t.reads()} if t.derive == GATHER else {})}
                        for t in self.tensors],
            "dropped": [{"name": n, "reason": r} for n, r in self.dropped],
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "bytes_to_read": self.bytes_read(),
            "serve_command": self.serve_command,
            **({"ir_export": self.ir_export.to_dict()} if self.ir_export else {}),
        }


def resolve_dtype(dtype: str, target: TargetInfo) -> str:
    if dtype != "auto":
        if dtype not in DTYPE_NAMES:
            raise UnsupportedConversionError(f"Unknown dtype {dtype!r}.",
                                             f"Use auto or one of {', '.join(DTYPE_NAMES)}.")
        return dtype
    if target.dtype_name:
        return target.dtype_name
    # No torch_dtype in the target config: the LM head's stored dtype is what the target really holds.
    stored = target.lm_head().dtype
    return next((name for name, dt in DTYPE_NAMES.items() if dt == stored), "bfloat16")


def build_plan(head: DraftHead, target: TargetInfo, *, to: str, dtype: str = "auto", fc_bias: str = "error",
               verifier: str | None = None, target_label: str | None = None, out_label: str = "OUT",
               num_speculative_tokens: int = 3, token_map: str | None = None,
               target_vocabulary: TargetVocabulary | None = None) -> Plan:
    from .validate import check_pair  # validation is pure and reads no tensor data

    layout = get_layout(to)
    spec = head.spec
    canonical = frozenset(head.tensors)
    refusal = layout.refusal(spec, canonical)
    if refusal:
        raise UnsupportedConversionError(f"Cannot write this {spec.variant} head as {option('to', to)}: {refusal}.",
                                         "`eagle-convert layouts` lists which layouts hold which heads, and the "
                                         "variant table in docs/layouts.md which layout holds which EAGLE-3 variant.")
    check_pair(spec, target)
    dtype_name = resolve_dtype(dtype, target)
    out_dtype = DTYPE_NAMES[dtype_name]
    notes = list(head.notes) + list(target.notes)
    warnings: list[str] = [layout.note] if layout.note else []  # e.g. which engines refuse the layout
    dropped = list(head.dropped)

    roles = dict(layout.output_names(spec, canonical))  # output name -> canonical role (or a derived marker)
    fold = False
    if spec.head_kind.fc_bias_foldable and spec.fc_bias and "fc.bias" not in roles.values():
        if fc_bias == "error":
            raise UnsupportedConversionError(
                f"This {spec.head_kind.title} head has an fc bias, which the {to} layout cannot express "
                "(vLLM V1 drops it silently and acceptance falls).",
                f"Re-run with {option('fc_bias', 'fold')} (exact: moves the bias into a draft-specific embedding, "
                f"E' = E + W_e^-1 b, and reports the error), {option('fc_bias', 'drop')} (lossy), or write "
                f"{option('to', 'vllm-v0')} / {option('to', 'sglang')}, which keep the bias.")
        if fc_bias == "drop":
            dropped.append(("fc.bias", "--fc-bias drop: the fc bias is discarded (lossy: expect lower acceptance)"))
            warnings.append("fc.bias dropped: the draft's outputs change; run `eagle-convert bench` to see the cost")
        else:
            fold = True
            roles["embed_tokens.weight"] = FOLD
            dropped.append(("fc.bias", "--fc-bias fold: folded into embed_tokens.weight"))

    tensors = [_planned(name, role, head, target, out_dtype) for name, role in roles.items()]
    tensors += [_zeros(name, derived, out_dtype) for name, derived in layout.derived_tensors(spec, canonical).items()]
    rewrites = layout.rewrites(spec)
    tensors = [replace(t, dtype=layout.output_dtype(t.name, t.shape, t.dtype), rewrite=rewrites.get(t.name))
               for t in tensors]
    used = {t.role for t in tensors} | ({"fc.bias", "embed_tokens.weight"} if fold else set())
    reasons = layout.dropped_reasons(spec)
    for role in sorted(canonical - used):
        if all(n != role for n, _ in dropped):
            dropped.append((role, reasons.get(role, f"the {to} layout has no place for it")))
    ctx = OutputContext(target_label=target_label or target.checkpoint.label, target_config=target.config,
                        out_label=out_label, dtype_name=dtype_name, verifier=verifier,
                        num_speculative_tokens=num_speculative_tokens, token_map=token_map,
                        target_vocabulary=target_vocabulary)
    warnings += layout.output_warnings(spec, ctx)
    ir_export = layout.ir_export(spec, ctx)
    warnings += list(ir_export.notes) if ir_export else []
    return Plan(layout=to, spec=spec, config=layout.output_config(spec, ctx), tensors=tuple(tensors),
                dropped=tuple(dropped), notes=tuple(notes), serve_command=layout.serve_command(spec, ctx),
                dtype_name=dtype_name, warnings=tuple(warnings), gguf_file=layout.gguf_file_for(spec),
                ir_export=ir_export)


def _cast_dtype(ref_dtype: torch.dtype, out_dtype: torch.dtype) -> torch.dtype:
    return out_dtype if ref_dtype.is_floating_point else ref_dtype  # d2t (int64) and t2d (bool) keep theirs


def _copied(name: str, role: str, origin: str, ref: TensorRef | Gathered, out_dtype: torch.dtype) -> PlannedTensor:
    derive = GATHER if isinstance(ref, Gathered) else None
    return PlannedTensor(name, role, origin, (Source(origin, ref),), _cast_dtype(ref.dtype, out_dtype), ref.shape,
                         derive=derive)


def _from_target(name: str, role: str, stored: StoredWeight, out_dtype: torch.dtype) -> PlannedTensor:
    """A target tensor as it is stored: copied (cast) when float, dequantized from FP8 codes and their scale."""
    if not stored.quantized:
        return _copied(name, role, "target", stored.ref, out_dtype)
    return PlannedTensor(name, role, "target", (Source("target", stored.ref), Source("target", stored.scale)),
                         out_dtype, stored.ref.shape, derive=DEQUANT, dequant=stored)


def _zeros(name: str, derived: DerivedTensor, out_dtype: torch.dtype) -> PlannedTensor:
    return PlannedTensor(name, derived.role, "derived", (), out_dtype, derived.shape, derive=ZEROS)


def _planned(name: str, role: str, head: DraftHead, target: TargetInfo, out_dtype: torch.dtype) -> PlannedTensor:
    spec = head.spec
    if role == FOLD:
        embed = (Source("draft", head.tensors["embed_tokens.weight"]) if "embed_tokens.weight" in head.tensors
                 else Source("target", target.embedding()))
        sources = (embed, Source("draft", head.tensors["fc.weight"]), Source("draft", head.tensors["fc.bias"]))
        return PlannedTensor(name, "embed_tokens.weight", "derived", sources, out_dtype, embed.ref.shape, derive=FOLD)
    if role == "lm_head.weight" and (spec.head_kind.target_lm_head or spec.lm_head_from_target):
        # EAGLE-1: always the target's; EAGLE-3 with draft_vocab_size null: the target's, written into the head
        return _from_target(name, role, target.lm_head_weight(), out_dtype)
    if role in head.tensors:
        return _copied(name, role, "draft", head.tensors[role], out_dtype)
    if role == "embed_tokens.weight":
        return _from_target(name, role, target.embedding_weight(), out_dtype)
    raise AssertionError(f"layout asked for {role!r}, which the head does not have")  # a layout bug, not user input
