"""The short README.md written beside every converted checkpoint."""

from __future__ import annotations

from .. import __version__


def model_card(plan, result) -> str:
    spec = plan.spec
    lines = [
        f"# EAGLE draft head ({spec.kind.upper()}) in the `{plan.layout}` layout",
        "",
        f"Converted by eagle-convert {__version__} from `{result.draft.label}` for the target `{result.target.label}`.",
        "",
        "Serve it with:",
        "",
        "```",
        plan.serve_command,
        "```",
        "",
        f"- dtype: {plan.dtype_name}; hidden size {spec.hidden_size}; vocab {spec.vocab_size}"
        + (f"; draft vocab {spec.draft_vocab_size}; aux layers {list(spec.aux_layer_ids or ())} (inputs of those "
           f"target layers); variant: {spec.variant}" if spec.head_kind.aux_states else ""),
        f"- RoPE: the draft's own (rope_theta {spec.rope_theta:g}); position limit raised to the target's",
    ]
    lines += [f"- dropped `{n}`: {r}" for n, r in plan.dropped]
    lines += [f"- note: {n}" for n in plan.notes]
    lines += ["", "`eagle_convert.json` records, for every tensor, the file and tensor it was read from, the sha256 of "
              "the bytes read, and how it was made (copy, cast, fold); every tensor written was read back and compared "
              "byte for byte.", ""]
    return "\n".join(lines)
