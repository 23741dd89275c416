"""What a layout of a head extracted from inside its target is (MTP layers: `convert --mtp TARGET --to`): which
target tensors it writes under which names (a rename table, as data), the config it writes, what it refuses and the
command that serves it. Pure, like every layout: the planner (conversion/mtp_plan.py) reads the tensors' headers and
passes `layers` (mtp/locate.py MtpLayers: family, count, trunk_layers, refs, copies, scales), the executor writes."""

from __future__ import annotations

import re

from ..kinds import MTP
from .base import Layout


class ExtractedLayout(Layout):
    kinds = (MTP,)
    readable = False  # a folder in this layout is told apart by mtp/folder.py, never read as an EAGLE draft
    from_target = True
    to = ""  # the --to value that picks it beside --mtp
    # (source pattern, output name): the first pattern a target tensor's name matches fully renames it (re.sub
    # template; "{trunk}" is the target's trunk layer count, where its MTP layers start); no match keeps the name.
    renames: tuple[tuple[str, str], ...] = ()
    single_file: str | None = None  # one named weights file and an index of just its weight_map (SGLang's export)
    dequantize_to: str | None = None  # --dequantize: FP8 codes x block scale written in this dtype (None: refused)
    config_as_is = False  # config.json: the target's own bytes (else `extracted_config`)

    def output_name(self, name: str, trunk_layers: int) -> str:
        for pattern, output in self.renames:
            source = re.compile(pattern.replace("{trunk}", str(trunk_layers)))
            if source.fullmatch(name):
                return source.sub(output, name)
        return name

    def extraction_refusal(self, layers, dequantize: bool) -> tuple[str, str] | None:
        """(what is wrong, what to do) when this target's MTP layers cannot be written in this layout."""
        return None

    def dropped_sources(self, layers, dequantize: bool) -> dict[str, str]:
        """Target tensors of the MTP layers left out on purpose, in the order said, with why."""
        return {}

    def extracted_config(self, config: dict, layers, dequantize: bool) -> bytes:
        """config.json as written, from the target's (unless `config_as_is`)."""
        raise NotImplementedError

    def extracted_serve_command(self, target: str, out: str, num_speculative_tokens: int, dequantize: bool) -> str:
        raise NotImplementedError
