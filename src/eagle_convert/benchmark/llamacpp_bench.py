"""`bench --engine llamacpp`: the same bench, prompts, report and gates as our runner, with llama.cpp b11434 decoding
(engines/llamacpp.py) and counting, and the llama.cpp-aligned `--compare` gate (docs/llamacpp.md).

llama.cpp does not prefill the prompt's last token: its first round drafts before the first target token (a round
our runner does not have, since it takes that token from the prefill), and a draft is cut to the tokens the budget
leaves. So its drafted totals and rounds differ from ours by design; the tokens and the accepted drafts per prompt
are what the two can share, and the gate compares those, showing the drafted totals beside them with the reason."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..conversion.converter import convert
from ..engines.llamacpp import VERSION, LlamaCppEngine, LlamaCppTools
from ..engines.llamacpp_vocab import LlamaCppVocab
from ..errors import EngineError
from ..io.gguf_file import read_gguf
from ..io.progress import announce
from ..runner.trees.shapes import TreeShape
from ..settings.bench import DecodeSettings
from ..settings.convert import ConvertSettings
from .bench_report import first_difference
from .compare import first_differing
from .gates import GateResult
from .inputs import BenchInputs
from .loop import run_baseline, run_conversations
from .session import Session

DRAFTED_REASON = ("llama.cpp drafts once more per request than our runner (its first round drafts before the first "
                  "target token, which our runner takes from the prefill) and cuts a draft to the tokens left, so "
                  "drafted totals differ by design and are shown, not gated")


def given_gguf(draft: str | None) -> bool:
    """A draft given as a GGUF file is served as it is (only llama.cpp reads it; no position checks apply)."""
    return draft is not None and draft.endswith(".gguf") and Path(draft).is_file()


def check_supported(decode: DecodeSettings) -> None:
    """What the examples cannot do, refused before anything is converted."""
    if decode.temperature != 0:
        raise EngineError(f"--engine llamacpp benches greedy decoding only (got --temperature {decode.temperature}).",
                          "llama-simple, its plain twin for the lossless check, decodes greedily: bench at "
                          "--temperature 0.")
    if decode.ignore_eos:
        raise EngineError("--ignore-eos is not supported with --engine llamacpp.",
                          "llama-simple (the baseline) always stops at the end-of-generation token: bench without "
                          "--ignore-eos.")


def head_gguf(inputs: BenchInputs, workdir: Path, dtype: str) -> tuple[Path, str | None]:
    """The head llama.cpp loads, and what was done to make it (None: served as given)."""
    if given_gguf(inputs.draft_name):
        return Path(inputs.draft_name), None
    out = workdir / "draft-gguf"
    convert(inputs.draft, inputs.target, out, ConvertSettings(to="gguf", dtype=dtype), inputs.hub)
    return out / "eagle3.gguf", "converted to GGUF (--to gguf) in a temporary folder"


def bench_llamacpp(inputs: BenchInputs, session: Session, decode: DecodeSettings, tools: LlamaCppTools, *,
                   dtype: str, baseline: bool, progress: bool, settings_of) -> tuple:
    """(run, settings, engine block) of llama.cpp on the session's prompts; `settings_of(info, draft_kind, aux)`
    builds the report's settings (engine_bench.py owns them)."""
    shape = TreeShape.chain(decode.k)
    request = dict(max_new_tokens=decode.max_new_tokens, temperature=0.0, seed=decode.seed)
    encode = None if session.tokenizer is None else _splitter(session.tokenizer.tokenizer)
    with tempfile.TemporaryDirectory(prefix="eagle-convert-llamacpp-") as workdir:
        work = Path(workdir)
        gguf_dtype = "float32" if dtype == "auto" else dtype
        announce("converting the target with llama.cpp's converter", enabled=progress)
        target_gguf = tools.convert_target(inputs.target_name, work / "target.gguf", gguf_dtype)
        draft, conversion = head_gguf(inputs, work, gguf_dtype)
        vocab = LlamaCppVocab.from_metadata(read_gguf(target_gguf).metadata)
        spec = LlamaCppEngine(tools, target_gguf, vocab, decode.k, draft=draft, encode=encode)
        run = run_conversations(session, spec, shape, progress=progress, what="bench (llama.cpp)", **request)
        if baseline:
            plain = LlamaCppEngine(tools, target_gguf, vocab, decode.k, encode=encode)
            run_baseline(run, plain, eos=session.eos, progress=progress, **request)
    head = None if given_gguf(inputs.draft_name) else inputs.head(inputs.target.checkpoint.config)
    info = {"device": "cpu", "dtype": gguf_dtype}
    settings = settings_of(info, head.spec.kind if head else "eagle3", head.spec.aux_layer_ids if head else None)
    block = {"name": "llamacpp", "mode": "offline", "version": VERSION, "bin": str(tools.bin_dir), "tp": None,
             "device": "cpu", "dtype": gguf_dtype, "speculative_config": {"num_speculative_tokens": decode.k,
                                                                          "spec_type": "draft-eagle3"},
             "start_time_s": None,
             "draft": {"given": inputs.draft_name, "served": "a temporary file" if conversion else str(draft),
                       "layout": "gguf", "conversion": conversion},
             "note": "ids sent as the text their pieces spell and read back from the printed text (docs/llamacpp.md)"}
    return run, settings, block


def _splitter(tokenizer):
    """Printed bytes -> the target tokenizer's ids, no special tokens added (a `tokenizers` Encoding or a list)."""
    def split(text: bytes) -> list[int]:
        encoded = tokenizer.encode(text.decode(errors="replace"), add_special_tokens=False)
        return list(getattr(encoded, "ids", encoded))
    return split


def llamacpp_compare_gate(ours: dict, engine: dict, engine_name: str) -> tuple[GateResult, list[dict]]:
    """fp32 greedy: the tokens of every prompt must be equal, and its accepted drafts (exit 3 otherwise), unless
    llama.cpp's extra first round explains the difference (_row); drafts and drafted tokens are shown side by side,
    with the reason they differ."""
    theirs = {p["id"]: p for p in engine["prompts"]}
    drafted_tokens = {c["id"]: c["num_draft_tokens"] for c in engine["engine"]["counters"]["prompts"]}
    k = ours["settings"]["k"]
    rows = [_row(mine, theirs.get(mine["id"]), drafted_tokens.get(mine["id"]), k) for mine in ours["prompts"]]
    exact = ours["settings"]["dtype"] == "float32" and engine["settings"]["dtype"] == "float32"
    differing = [r["id"] for r in rows if not r["identical"]]
    explained = [r["id"] for r in rows if r["first_round_accepted"]]
    details = {"exact": exact, "differing_prompts": differing, "compared": "accepted drafts and tokens per prompt",
               "first_round_accepted": explained,
               "drafted": {"ours": sum(r["ours"]["drafted"] for r in rows),
                           "engine": sum(r["engine_drafted_tokens"] or 0 for r in rows),
                           "why_they_differ": DRAFTED_REASON}}
    drafted = (f"drafted {details['drafted']['ours']} (ours) vs {details['drafted']['engine']} ({engine_name}): "
               f"{DRAFTED_REASON}.") + (f" On {len(explained)} prompt(s) ({', '.join(map(str, explained))}) its "
                                       "extra first round accepted drafts too: more accepted in no more rounds, "
                                       "shown, not failed." if explained else "")
    if not exact:
        return GateResult("engine_compare", True, f"ours and {engine_name} side by side (not float32 on both: shown, "
                          f"not gated). {drafted}", details), rows
    if not differing:
        return GateResult("engine_compare", True, f"ours and {engine_name} accept the same drafts and emit the same "
                          f"tokens on every prompt (fp32 greedy). {drafted}", details), rows
    first, where = first_differing(rows)
    return GateResult("engine_compare", False, (
        f"ours and {engine_name} differ in fp32 greedy decoding on {len(differing)} of {len(rows)} prompts: prompt "
        f"{first['id']!r} accepted {first['ours']['accepted']} (ours) vs {(first['engine'] or {}).get('accepted')} "
        f"({engine_name}), {where}. llama.cpp reads the head differently from how we read it: its taps "
        "(eagle3.target_layers), d2t (absolute target ids) or a norm flag (check `eagle-convert inspect` on the head "
        f"and `convert --to gguf`). {drafted}"), details), rows


def _row(mine: dict, other: dict | None, drafted_tokens: int | None, k: int) -> dict:
    a = _counts(mine["acceptance"])
    b = _counts(other["acceptance"]) if other else None
    diff = (first_difference(mine["output_token_ids"], other["output_token_ids"], ("ours", "engine"))
            if other else None)
    same = other is not None and diff is None and a["accepted"] == b["accepted"]
    # Its extra first round drafted the first token right: more accepted in no more rounds than ours, the signature
    # of that round (the same tokens in fewer rounds), by at most one round's k drafts per turn (each turn is one
    # llama.cpp run with its own first round); a head llama.cpp reads wrong accepts fewer, and fails.
    extra_at_most = k * len(mine["output_token_ids"])
    first_round = (other is not None and diff is None and b["drafts"] <= a["drafts"]
                   and a["accepted"] < b["accepted"] <= a["accepted"] + extra_at_most)
    return {"id": mine["id"], "ours": a, "engine": b, "first_difference": diff, "identical": same or first_round,
            "first_round_accepted": first_round, "compared": ["accepted", "output_token_ids"],
            "engine_drafted_tokens": drafted_tokens, "drafted_note": DRAFTED_REASON}


def _counts(acceptance: dict) -> dict:
    return {key: acceptance[key] for key in ("drafts", "drafted", "accepted", "histogram", "mean_acceptance_length")}
