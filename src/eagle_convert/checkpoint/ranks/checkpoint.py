"""A target saved per rank, seen as a Checkpoint: the LM head and embedding under their Hugging Face names, each a
`Gathered` plan over the rank files' shards (or a plain TensorRef when a format replicates it). Opening one reads
config.json and the safetensors headers of the rank files of the stages that hold the two tensors: no tensor data."""

from __future__ import annotations

from ...errors import LayoutError, MissingTensorError
from ...io.source import FileSource
from ...spec import TARGET_EMBED, TARGET_LM_HEAD
from ..index import Checkpoint, TensorRef, config_dtype, parse_safetensors_header, read_config
from .rank_formats import RankLayout, detect
from .shards import Gathered, check_head_entries, pad64, plan_gather

# Which pipeline stage holds each tensor: vLLM and TRT-LLM put the LM head in the last stage, the embedding in the
# first (a tied last stage may hold only lm_head.weight, sharing storage with its own embedding copy).
STAGE_OF = {TARGET_LM_HEAD: "last", TARGET_EMBED: "first"}


def open_target_checkpoint(source: FileSource, pattern: str | None = None) -> Checkpoint:
    """A per-rank target when the folder is one (checked before any index is read), else the ordinary Checkpoint."""
    config = read_config(source) if source.exists("config.json") else None
    layout = detect(source.files(), config, source.label, pattern)
    if layout is None:
        return Checkpoint(source)
    if config is None:
        raise LayoutError(f"The per-rank target {source.label} has no config.json.",
                          "Copy the source model's config.json next to the rank files (vLLM's save script does).")
    return RankedCheckpoint(source, config, layout)


class RankedCheckpoint(Checkpoint):
    weight_format = "safetensors"

    def __init__(self, source: FileSource, config: dict, layout: RankLayout):
        # Not Checkpoint.__init__: it would trust the (stale, copied) index.
        self.source, self.config, self.layout = source, config, layout
        self.weight_map, self._headers, self._pickles, self._pickle_spans = {}, {}, {}, {}
        self.files = sorted(f for files in layout.files.values() for f in files)
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
        self.vocab, self.hidden = int(text["vocab_size"]), int(text["hidden_size"])
        tie = text.get("tie_word_embeddings", config.get("tie_word_embeddings"))
        self.notes: list[str] = []
        self._tensors = self._plan_both(tie)
        self.notes.insert(0, self.summary_line())
        if source.exists("model.safetensors.index.json"):
            self.notes.append("its model.safetensors.index.json is ignored: the save script copied it from the source "
                              "model, and it names files that are not the rank files")
        stored = next(iter(self._tensors.values())).dtype
        self.stored_dtype = str(stored).removeprefix("torch.")
        said = config_dtype(text)
        if said and said != self.stored_dtype:
            self.notes.append(f"the rank files hold {self.stored_dtype} (the engine's runtime dtype) "
                              f"though config.json says {said}: --dtype auto writes {self.stored_dtype}")

    # ---- the Checkpoint interface, for the two tensors a head takes from its target ----------------------------
    def names(self) -> list[str]:
        return sorted(self._tensors)

    def has(self, name: str) -> bool:
        return name in self._tensors

    def file_of(self, name: str) -> str:
        return self._tensors[name].file if name in self._tensors else ""

    def ref(self, name: str):
        if name not in self._tensors:
            raise MissingTensorError(f"The per-rank target {self.label} provides only {', '.join(self.names())}; "
                                     f"{name!r} is not gathered from rank files.",
                                     "A head takes only the LM head and embedding from its target.")
        return self._tensors[name]

    # ---- planning --------------------------------------------------------------------------------------------
    def _stage(self, which: str) -> int:
        return self.layout.pp - 1 if which == "last" else 0

    def _stage_refs(self, stage: int) -> dict[int, dict[str, TensorRef]]:
        """Per TP rank of `stage`: every tensor of all its part files (headers only)."""
        out = {}
        for tp, files in sorted(self.layout.stage_files(stage).items()):
            refs: dict[str, TensorRef] = {}
            for rel in files:
                if rel not in self._headers:
                    self._headers[rel] = parse_safetensors_header(self.source, rel)
                refs.update(self._headers[rel])
            out[tp] = refs
        return out

    def _find(self, hf_name: str) -> TensorRef | Gathered | None:
        fmt = self.layout.format
        name = fmt.lm_head if hf_name == TARGET_LM_HEAD else fmt.embed
        stage = self._stage(STAGE_OF[hf_name])
        per_rank = self._stage_refs(stage)
        for tp, refs in per_rank.items():
            check_head_entries(name, refs, fmt.quantized_suffixes, f"The rank files of rank {tp} of {self.label}")
        holders = [tp for tp, refs in per_rank.items() if name in refs]
        if not holders:
            return None
        if len(holders) != len(per_rank):
            missing = sorted(set(per_rank) - set(holders))
            raise MissingTensorError(f"{name} is in the rank files of ranks {holders} of {self.label} but not of "
                                     f"ranks {missing}.", "Copy every part file of every rank.")
        shards = [per_rank[tp][name] for tp in sorted(per_rank)]
        stage_label = f"pp stage {stage} of {self.layout.pp}" if self.layout.pp > 1 else ""
        split = self.layout.embedding_split if hf_name == TARGET_EMBED else "vocab"
        if split == "replicated":  # TRT-LLM's default embedding: the whole [V, H] on every rank; rank 0's is read
            ref = shards[0]
            if ref.shape != (self.vocab, self.hidden):
                raise LayoutError(f"{name} in {ref.file} is {list(ref.shape)}; the TensorRT-LLM config says it is "
                                  f"replicated (use_parallel_embedding false), so it must be [{self.vocab}, "
                                  f"{self.hidden}].", "Check that config.json belongs to these rank files.")
            return ref
        padding = fmt.padding if hf_name == TARGET_LM_HEAD or fmt.padding == "pad64" else "tp-chunk"
        return plan_gather(name, shards, vocab=self.vocab, hidden=self.hidden, padding=padding,
                           dim=1 if split == "hidden" else 0, label=self.label, stage=stage_label)

    def _plan_both(self, tie) -> dict[str, TensorRef | Gathered]:
        """Both tensors; a tied target's one stored matrix stands for both (vLLM keeps only lm_head.weight, models
        without an LM head module only the embedding), unless the config says the embeddings are not tied."""
        found = {n: self._find(n) for n in (TARGET_LM_HEAD, TARGET_EMBED)}
        present = {n: r for n, r in found.items() if r is not None}
        if not present:
            fmt = self.layout.format
            raise MissingTensorError(f"The rank files of {self.label} hold neither {fmt.lm_head} nor {fmt.embed}.",
                                     "These are not the rank files of a causal LM target, or their tensors are "
                                     "prefixed (multimodal wrappers): export the target to Hugging Face format.")
        if len(present) == 1:
            (have, ref), = present.items()
            other = TARGET_EMBED if have == TARGET_LM_HEAD else TARGET_LM_HEAD
            if tie is False:
                fmt = self.layout.format
                missing = fmt.embed if other == TARGET_EMBED else fmt.lm_head
                raise MissingTensorError(f"The rank files of {self.label} hold {ref.name} but no {missing}, and "
                                         "config.json says tie_word_embeddings: false.",
                                         "Copy every rank and part file of the save, or restore the saved model's "
                                         "config.json.")
            present[other] = ref
            self.notes.append(f"tied embeddings: {ref.name} of the rank files stands for both the LM head and the "
                              "embedding")
        return present

    # ---- description (inspect, --dry-run) -----------------------------------------------------------------------
    def summary_line(self) -> str:
        lay = self.layout
        return (f"per-rank target: {lay.format.title}, tp={lay.tp}" + (f", pp={lay.pp}" if lay.pp > 1 else "")
                + f", {lay.parts} part(s) per rank, vocab {self.vocab} padded to {self.padded_vocab()}")

    def padded_vocab(self) -> int:
        if self.layout.format.padding == "pad64":
            return pad64(self.vocab)
        return -(-self.vocab // self.layout.tp) * self.layout.tp

    def describe(self) -> dict:
        lay = self.layout
        tensors = {}
        for hf_name, ref in self._tensors.items():
            leaves = ref.leaves() if isinstance(ref, Gathered) else (ref,)
            tensors[hf_name] = {
                "from": ref.name, "how": ref.how() if isinstance(ref, Gathered) else "copy of rank 0's replica",
                "dtype": str(ref.dtype).removeprefix("torch."), "shape": list(ref.shape),
                "reads": [{"file": s.file, "name": s.name, "offset": s.offset, "bytes": s.nbytes,
                           "shape": list(s.shape)} for s in leaves]}
        return {"format": lay.format.name, "title": lay.format.title, "tp": lay.tp, "pp": lay.pp,
                "parts_per_rank": lay.parts, "pattern": lay.pattern, "vocab_size": self.vocab,
                "padded_vocab": self.padded_vocab(), "hidden_size": self.hidden,
                "dtype": self.stored_dtype, "files": self.files, "tensors": tensors, "notes": self.notes}
