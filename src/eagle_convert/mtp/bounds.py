"""Every count a config gives that drives a loop over MTP tensor names (the MTP layers, the routed experts), bounded
by what the checkpoint's tensors hold before any loop runs: `num_nextn_predict_layers: 10**30` or
`n_routed_experts: 10**30` is refused at once, naming the key, its value and what the tensors hold, where a loop over
it would run for hours or end in a MemoryError. A count above what is held is never a complete layer, so refusing it
here loses no case the completeness check (locate.py) would have accepted."""

from __future__ import annotations

import re

from ..errors import LayoutError
from .families import MtpFamily, text_config
from .signature import config_int

EXPERT = re.compile(r"\.experts\.(\d+)\.")
EXPERT_KEYS = {"deepseek_moe": "n_routed_experts", "qwen_moe": "num_experts"}  # family.mlp -> the key counting them


def layers_held(family: MtpFamily, trunk_layers: int, area) -> list[int]:
    """The MTP layer indices (0-based) that some tensor in the MTP area belongs to."""
    block = re.compile(re.escape(family.block).replace(re.escape("{L}"), r"(\d+)"))
    offset = trunk_layers if family.appended else 0
    return sorted({int(m.group(1)) - offset for name in area if (m := block.match(name))})


def experts_held(area) -> list[int]:
    return sorted({int(m.group(1)) for name in area if (m := EXPERT.search(name))})


def check_counts(family: MtpFamily, config: dict, key: str, count: int, trunk_layers: int, area, whose: str) -> None:
    """Refuse a layer or expert count larger than what the tensors under the MTP prefix hold."""
    layers = layers_held(family, trunk_layers, area)
    if count > len(layers):
        _refuse(key, count, f"{len(layers)} {family.title} MTP layer(s)"
                + (f" (index {', '.join(map(str, layers[:6]))})" if layers else ""), whose,
                f"set {key} to the number of MTP layers the release ships")
    expert_key = EXPERT_KEYS.get(family.mlp)
    experts = config_int(text_config(config), expert_key, 0) if expert_key else 0
    if experts > len(held := experts_held(area)):
        _refuse(expert_key, experts, f"{len(held)} routed expert(s) per MTP layer", whose,
                f"set {expert_key} to the number of experts the release ships")


def _refuse(key: str, value: int, held: str, whose: str, fix: str) -> None:
    raise LayoutError(
        f"config.json says {key}: {value}, but {whose[0].lower() + whose[1:]} tensors under the MTP prefix hold "
        f"{held}: the config promises more than the checkpoint can hold, so its MTP layers cannot be checked "
        "complete.", f"Restore config.json from the original release (or {fix}); if tensors are missing, use an "
        "intact copy of the release.")
