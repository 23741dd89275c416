"""TEMPORARY stand-in for t25-extract's MTP families table (eagle_convert.mtp); replaced when it lands."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MtpFamily:
    name: str
    architectures: tuple[str, ...]
    prefix: str  # "{N}" = num_hidden_layers + i
    hidden_first: bool = False
    text_config: str | None = None

    def sizes_config(self, config: dict) -> dict:
        sub = config.get(self.text_config) if self.text_config else None
        return sub if isinstance(sub, dict) else config

    def layer_prefixes(self, config: dict) -> list[str]:
        sizes = self.sizes_config(config)
        count = int(sizes.get("num_nextn_predict_layers") or sizes.get("mtp_num_hidden_layers") or 0)
        n = int(sizes.get("num_hidden_layers") or 0)
        return [self.prefix.format(N=n + i, i=i) for i in range(count)]

    def owns(self, config: dict, name: str) -> bool:
        return any(name.startswith(p) for p in self.layer_prefixes(config))

    def canonical(self, config: dict, name: str) -> str:
        for i, p in enumerate(self.layer_prefixes(config)):
            if name.startswith(p):
                return f"layers.{i}." + name[len(p):]
        return name


FAMILIES = (
    MtpFamily("mimo", ("MiMoForCausalLM",), "model.mtp_layers.{i}.", hidden_first=True),
    MtpFamily("deepseek_v3", ("DeepseekV3ForCausalLM",), "model.layers.{N}."),
    MtpFamily("glm4_moe", ("Glm4MoeForCausalLM",), "model.layers.{N}."),
    MtpFamily("qwen3_next", ("Qwen3NextForCausalLM",), "mtp."),
)


def mtp_family_of(config: dict) -> MtpFamily | None:
    archs = set(config.get("architectures") or ())
    return next((f for f in FAMILIES if archs & set(f.architectures)), None)
