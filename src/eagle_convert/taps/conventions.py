"""The one tap convention, and the table of every place target layer ids are stored (docs/taps.md). Pure data.

Internally (`DraftSpec.aux_layer_ids`) id i is the INPUT of target layer i, transformers' `hidden_states[i]` (the
embedding output is 0), as vLLM, llama.cpp and the EAGLE reference feed it. Some stores count the OUTPUT of layer i
(= the input of layer i + 1), so they hold internal - 1. Every layout reads and writes ids through a row of
CONVENTIONS: no layout adds or subtracts 1 by itself, so a store that counts differently is one row here, not a
`- 1` hidden in a writer."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LayoutError
from ..spec import default_aux_layer_ids

INPUT, OUTPUT = "input", "output"  # what a stored id i names: the input of layer i, or its output

# Where a spec's ids came from (DraftSpec.aux_ids_origin), besides the name of the row they were read from:
DEFAULT = "default"  # absent from the draft: the EAGLE reference default for the target's layer count
ABSENT = "absent"  # absent, and no target to fill the default from
NO_AUX = "none"  # the head reads no aux states (use_aux_hidden_state false) and states no ids
DEFAULT_RULE = "[2, N//2, N-3]"  # what DEFAULT is, in the EAGLE reference's words (spec.default_aux_layer_ids)


@dataclass(frozen=True)
class TapConvention:
    name: str
    path: tuple[str, ...]  # the keys leading to the list in its config (or rt_info); a GGUF key is one key with dots
    counts: str  # INPUT or OUTPUT
    who: str  # the engines and exporters that store or read ids here

    @property
    def key(self) -> str:
        return ".".join(self.path)

    @property
    def shift(self) -> int:
        """stored id = internal id + shift."""
        return -1 if self.counts == OUTPUT else 0

    def to_stored(self, ids) -> list[int]:
        return [int(i) + self.shift for i in ids]

    def to_internal(self, stored) -> tuple[int, ...]:
        return tuple(int(i) - self.shift for i in stored)

    def read(self, config: dict) -> list | None:
        """The list as stored (not translated); None when the place is absent (an empty list is not absent)."""
        node = config
        for key in self.path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return node

    def write(self, config: dict, ids) -> None:
        """Store internal `ids` here, in this place's count (creating the nested dicts on the way)."""
        node = config
        for key in self.path[:-1]:
            node = node.setdefault(key, {})
        node[self.path[-1]] = self.to_stored(ids)


AUX_IDS = "eagle_aux_hidden_state_layer_ids"
CONVENTIONS = {c.name: c for c in (
    TapConvention("vllm", (AUX_IDS,), INPUT,
                  "vLLM, speculators eagle3, SpecForge and the EAGLE reference (draft config, top level)"),
    TapConvention("vllm-nested", ("eagle_config", AUX_IDS), INPUT,
                  "vLLM's second place (read when the top level is absent; raw vLLM and speculators layouts)"),
    TapConvention("sglang-nested", ("eagle_config", AUX_IDS), OUTPUT,
                  "SGLang 0.5.23 (reads only this place and adds 1), NVIDIA ModelOpt (saved and exported), "
                  "SGLang-lineage releases (midlayer.*)"),
    TapConvention("gguf", ("eagle3.target_layers",), INPUT, "llama.cpp b11434 GGUF metadata"),
    TapConvention("openvino", ("hidden_layers_list",), OUTPUT, "OpenVINO GenAI 2026.4 draft IR rt_info"),
    TapConvention("dflash", ("dflash_config", "target_layer_ids"), OUTPUT,
                  "DFlash z-lab config (vLLM `method: dflash` reads it)"),
    TapConvention("speculators-dflash", ("aux_hidden_state_layer_ids",), INPUT, "speculators dflash config"),
    TapConvention("gguf-dflash", ("dflash.target_layers",), INPUT,
                  "llama.cpp b11434 DFlash GGUF metadata (its converter writes target_layer_ids + 1)"),
)}
TOP = CONVENTIONS["vllm"]
# How inspect names each store, in the order it lists them.
SHOWN_AS = {"vllm": "vLLM/speculators eagle_aux_hidden_state_layer_ids", "gguf": "llama.cpp eagle3.target_layers",
            "speculators-dflash": "speculators DFlash aux_hidden_state_layer_ids",
            "sglang-nested": "SGLang/ModelOpt eagle_config ids", "openvino": "OpenVINO hidden_layers_list",
            "dflash": "DFlash target_layer_ids"}


def translate(ids, source: str, destination: str) -> list[int]:
    """Ids stored in one convention, as another stores the same layers."""
    return CONVENTIONS[destination].to_stored(CONVENTIONS[source].to_internal(ids))


def read_aux_ids(config: dict, nested: str, label: str) -> tuple[tuple[int, ...] | None, str | None]:
    """(internal ids, the row they were read from) from a draft config's top level and its nested eagle_config, read
    in `nested`'s count; (None, None) when neither states them. Two places that disagree are an error."""
    found = [(row, row.to_internal(stored)) for row in (CONVENTIONS[nested], TOP)
             if (stored := row.read(config)) is not None]
    if len(found) == 2 and found[0][1] != found[1][1]:
        (inner, a), (top, b) = found
        raise LayoutError(f"{label}: the config says {AUX_IDS}={top.read(config)!r} at the top level but "
                          f"{AUX_IDS}={inner.read(config)!r} in eagle_config"
                          + (f" (layer outputs: the inputs of {list(a)})" if inner.shift else "") + ".",
                          f"Keep one value of {AUX_IDS} (the one the head was trained with).")
    return (found[0][1], found[0][0].name) if found else (None, None)


def origin_text(origin: str | None, ids, num_target_layers: int | None = None) -> str:
    """Where the ids came from, in words (inspect's flag source, the conversion notes)."""
    if origin in CONVENTIONS:
        row = CONVENTIONS[origin]
        return (f"config {row.key}" + (" (counts layer outputs: read +1)" if row.shift else "")
                + (" (stated empty: no layers)" if ids is not None and not list(ids) else ""))
    if origin == DEFAULT:
        return f"absent in the draft: the EAGLE reference default {DEFAULT_RULE} for a {num_target_layers}-layer target"
    if origin == NO_AUX:
        return "none: the head reads no aux states"
    return f"absent from the draft: the EAGLE reference default {DEFAULT_RULE} of the target applies"


def default_note(ids, num_target_layers: int | None) -> str:
    return (f"aux layer ids absent in the draft: the EAGLE reference default {list(ids)} ({DEFAULT_RULE}) for a "
            f"{num_target_layers}-layer target, written explicitly into every output config (never an engine's guess)")


def fill_default(num_aux: int, num_target_layers: int) -> tuple[int, ...] | None:
    """The EAGLE reference default for a head of three aux states; None where the trainer documents none."""
    return default_aux_layer_ids(num_target_layers) if num_aux == 3 and num_target_layers else None


def describe_taps(ids, origin: str | None, num_target_layers: int | None = None) -> dict:
    """inspect's `taps`: the internal ids, where they came from, and each store's numbers for the same layers."""
    known = ids is not None and origin != NO_AUX
    return {"internal": list(ids) if ids is not None else None, "counts": INPUT, "origin": origin,
            "source": origin_text(origin, ids, num_target_layers),
            "conventions": {name: {"key": row.key, "counts": row.counts, "who": row.who,
                                   "ids": row.to_stored(ids) if known else None}
                            for name, row in CONVENTIONS.items()}}


def taps_line(taps: dict) -> str:
    """'inputs of [2, 6, 9] (config ...) = vLLM ... [2, 6, 9]; ... OpenVINO hidden_layers_list [1, 5, 8]; ...'."""
    ids = taps["internal"]
    if taps["origin"] == NO_AUX:
        return "none (the head reads the target's last hidden state)"
    if ids is None:
        return f"not stated ({taps['source']}; pass --target to see them)"
    shown = "; ".join(f"{SHOWN_AS[name]} {taps['conventions'][name]['ids']}" for name in SHOWN_AS)
    return f"inputs of {ids} ({taps['source']}) = {shown}"
