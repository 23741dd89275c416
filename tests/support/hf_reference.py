"""transformers' own model (eager attention, fp32), built from a tiny config and given weights: the reference the
runner's logits are compared with."""

from __future__ import annotations


def hf_model(config: dict, weights: dict):
    import transformers  # here, so that importing this module needs no transformers (the tests skip without it)

    hf_config = transformers.AutoConfig.for_model(**config)
    hf_config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(hf_config, attn_implementation="eager").eval()
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= ({"lm_head.weight"} if config.get("tie_word_embeddings") else set()), missing
    return model
