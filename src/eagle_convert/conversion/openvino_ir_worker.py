"""Run by the interpreter that has OpenVINO and optimum-intel (conversion/openvino_export.py), so it imports nothing
from eagle_convert:

  PYTHON openvino_ir_worker.py '{"source": HEAD_DIR, "out": IR_DIR, "weight_format": "fp32", "rt_info": {...}}'

Exports the EAGLE-3 head in HEAD_DIR (`LlamaForCausalLMEagle3`, released layout) with optimum-intel's own CLI code
(--trust-remote-code: optimum-intel injects its model code for that architecture), then sets every rt_info key given
(GenAI reads `hidden_layers_list` and `eagle3_mode` there; passing the list to draft_model(...) fails a type check in
GenAI 2026.4.1) and saves the IR again. Prints one JSON line: the versions and the rt_info read back."""

from __future__ import annotations

import json
import sys
from pathlib import Path

IR = "openvino_model.xml"


def export(source: Path, out: Path, weight_format: str) -> None:
    from optimum.commands.optimum_cli import main

    sys.argv = ["optimum-cli", "export", "openvino", "-m", str(source), "--task", "text-generation-with-past",
                "--weight-format", weight_format, "--trust-remote-code", str(out)]
    main()


def set_rt_info(out: Path, rt_info: dict) -> dict:
    import openvino as ov

    core = ov.Core()
    model = core.read_model(out / IR)
    for key, value in rt_info.items():
        model.set_rt_info(value, key)
    staged = out / ".rt_info"  # the IR read above maps its .bin: save beside it, then replace both files
    staged.mkdir()
    ov.save_model(model, staged / IR, compress_to_fp16=False)
    del model
    for name in (IR, "openvino_model.bin"):
        (staged / name).replace(out / name)
    staged.rmdir()
    saved = core.read_model(out / IR)
    read_back = {key: _as_given(saved.get_rt_info(key).value, rt_info[key]) for key in rt_info}
    if read_back != rt_info:  # never an IR whose rt_info GenAI would read otherwise than asked
        raise RuntimeError(f"the saved IR's rt_info reads {read_back}, not {rt_info}")
    return read_back


def _as_given(value, given):
    """rt_info reads back as a string ("1 5 8" for a list): in the type it was given."""
    if isinstance(given, list):
        return [int(v) for v in (value.split() if isinstance(value, str) else value)]
    return str(value)


def main() -> None:
    args = json.loads(sys.argv[1])
    out = Path(args["out"])
    export(Path(args["source"]), out, args["weight_format"])
    written = set_rt_info(out, args["rt_info"])
    import openvino
    import optimum.intel.version as optimum_intel

    print(json.dumps({"openvino": openvino.__version__, "optimum_intel": optimum_intel.__version__,
                      "rt_info": written}))


if __name__ == "__main__":
    main()
