"""Corrupt safetensors headers and non-finite values: refused with a typed, one-paragraph error that names the file
and tensor, nothing written, inputs untouched; --allow-nonfinite writes source NaN/Inf and records them."""

from __future__ import annotations

import json
import math
import struct

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file
from support.convert import tree_fingerprint

import eagle_convert
from eagle_convert import errors
from eagle_convert.cli.main import main
from eagle_convert.conversion.derive import fold_fc_bias
from eagle_convert.testing.tiny import TinyConfig

EAGLE3 = {"cfg": TinyConfig(num_hidden_layers=8), "kind": "eagle3"}


def rewrite_header(path, edit=None, *, raw: bytes | None = None, extra: bytes = b"") -> None:
    """Rewrite a safetensors file's header (edit(header) in place, or `raw` bytes) keeping its data section, plus
    `extra` bytes at the end."""
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    if edit:
        edit(header)
    new = raw if raw is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(new)) + new + data[8 + n:] + extra)


def refused(draft, target, out, error, match, **kwargs):
    """convert refuses with `error` (matching `match`), leaves no output and changes no input."""
    before = tree_fingerprint(draft), tree_fingerprint(target)
    with pytest.raises(error, match=match) as info:
        eagle_convert.convert(str(draft), str(target), out, **kwargs)
    assert info.value.hint
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.eagle-convert-*"))
    assert (tree_fingerprint(draft), tree_fingerprint(target)) == before
    return info.value


def header_refused(pair, tmp_path, edit=None, *, match, **kwargs):
    target, draft, _ = pair(**EAGLE3)
    rewrite_header(draft / "model.safetensors", edit, **kwargs)
    err = refused(draft, target, tmp_path / "out", errors.CorruptCheckpointError, match, to="vllm")
    assert str(draft / "model.safetensors") in err.message
    return err


def same_span(header, name: str, other: str) -> None:
    header[name]["data_offsets"] = list(header[other]["data_offsets"])


def test_a_negative_control_converts(pair, tmp_path):
    target, draft, _ = pair(**EAGLE3)
    rewrite_header(draft / "model.safetensors", lambda h: None)  # re-encoded, same entries: still valid
    eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="vllm")
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_overlapping_offsets(pair, tmp_path):
    # norm.weight lies after midlayer.hidden_norm.weight: pointing it at the latter's bytes overlaps them
    err = header_refused(pair, tmp_path, lambda h: same_span(h, "norm.weight", "midlayer.hidden_norm.weight"),
                         match="overlaps")
    assert "'norm.weight'" in err.message and "midlayer.hidden_norm.weight" in err.message


def test_non_integer_shape(pair, tmp_path):
    # [64.5] used to be read as int(64.5) = 64, which matches the byte span: the shape itself must be integers
    err = header_refused(pair, tmp_path, lambda h: h["norm.weight"].update(shape=[64.5]), match="non-negative integers")
    assert "'norm.weight'" in err.message


def test_negative_shape(pair, tmp_path):
    # [-1, -64] has the right product (64 elements, 256 bytes) and used to pass the byte-count check
    header_refused(pair, tmp_path, lambda h: h["norm.weight"].update(shape=[-1, -64]), match="'norm.weight'.*shape")


def test_deeply_nested_header_is_corruption_not_a_crash(pair, tmp_path):
    header_refused(pair, tmp_path, raw=b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", match="nested too deeply")


def test_deeply_nested_config_is_corruption_not_a_crash(pair, tmp_path):
    target, draft, _ = pair(**EAGLE3)
    (draft / "config.json").write_text('{"a": ' + "[" * 200_000 + "]" * 200_000 + "}")
    refused(draft, target, tmp_path / "out", errors.CorruptCheckpointError, "nested too deeply", to="vllm")


def test_unknown_dtype(pair, tmp_path):
    err = header_refused(pair, tmp_path, lambda h: h["norm.weight"].update(dtype="F33"), match="unknown or unsupported")
    assert "'norm.weight'" in err.message and "F33" in err.message


def test_span_that_is_not_shape_times_dtype_size(pair, tmp_path):
    header_refused(pair, tmp_path, lambda h: h["norm.weight"].update(shape=[32]), match="'norm.weight' spans 256 bytes")


def test_trailing_bytes_after_the_last_tensor(pair, tmp_path):
    header_refused(pair, tmp_path, extra=b"\0" * 8, match="file holds .* bytes of data")


def test_a_gap_between_tensors(pair, tmp_path):
    target, draft, _ = pair(**EAGLE3)
    path = draft / "model.safetensors"
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    begin, end = json.loads(data[8:8 + n])["norm.weight"]["data_offsets"]
    moved = data[8 + n + begin:8 + n + end]  # norm.weight's bytes, copied to the end: its old place is a gap

    def move(header):
        header["norm.weight"]["data_offsets"] = [len(data) - 8 - n, len(data) - 8 - n + len(moved)]

    rewrite_header(path, move, extra=moved)
    err = refused(draft, target, tmp_path / "out", errors.CorruptCheckpointError,
                  f"leaves bytes {begin}..{end} of the data section unused", to="vllm")
    assert str(path) in err.message


def test_metadata_must_map_strings_to_strings(pair, tmp_path):
    header_refused(pair, tmp_path, lambda h: h.update(__metadata__={"format": 1}), match="__metadata__")


def test_duplicate_tensor_names(pair, tmp_path):
    target, draft, _ = pair(**EAGLE3)
    data = (draft / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = data[8:8 + n].rstrip()
    entry = json.dumps({"norm.weight": json.loads(header)["norm.weight"]})[1:-1]
    rewrite_header(draft / "model.safetensors", raw=header[:-1] + b"," + entry.encode() + b"}")
    refused(draft, target, tmp_path / "out", errors.CorruptCheckpointError, "'norm.weight' appears twice", to="vllm")


# ---- non-finite values ----------------------------------------------------------------------------------------------
def poison(path, name: str, values: dict[tuple[int, ...], float]) -> None:
    tensors = load_file(path) if path.suffix == ".safetensors" else torch.load(path)
    for index, value in values.items():
        tensors[name][index] = value
    save_file(tensors, path, metadata={"format": "pt"}) if path.suffix == ".safetensors" else torch.save(tensors, path)


NAN, INF = float("nan"), float("inf")


def test_nan_in_an_eagle3_lm_head_is_refused_with_name_and_count(pair, tmp_path):
    target, draft, _ = pair(**EAGLE3)
    poison(draft / "model.safetensors", "lm_head.weight", {(3, 0): NAN, (3, 1): NAN, (7, 5): INF})
    poison(draft / "model.safetensors", "norm.weight", {(0,): -INF})
    err = refused(draft, target, tmp_path / "out", errors.NonFiniteError, "NaN or Inf", to="vllm")
    assert "lm_head.weight: 3 (from draft model.safetensors:lm_head.weight)" in err.message
    assert "norm.weight: 1 (from draft model.safetensors:norm.weight)" in err.message  # every such tensor
    assert "allow_nonfinite=True" in err.hint and "--allow-nonfinite" not in err.hint  # spelled for Python


def test_allow_nonfinite_proceeds_and_says_so(pair, tmp_path):
    target, draft, _ = pair(**EAGLE3)
    poison(draft / "model.safetensors", "lm_head.weight", {(3, 0): NAN, (7, 5): INF})
    out = tmp_path / "out"
    run = CliRunner().invoke(main, ["convert", str(draft), "-t", str(target), "-o", str(out), "--to", "vllm",
                                    "--allow-nonfinite"])
    assert run.exit_code == 0, run.output
    assert "warning: lm_head.weight holds 2 NaN/Inf value(s)" in " ".join(run.stderr.split())
    provenance = json.loads((out / "eagle_convert.json").read_text())
    assert provenance["nonfinite"] == {"lm_head.weight": 2}
    assert provenance["tensors"]["lm_head.weight"]["nonfinite"] == 2
    assert "nonfinite" not in provenance["tensors"]["fc.weight"]
    written, source = load_file(out / "model.safetensors")["lm_head.weight"], load_file(draft / "model.safetensors")
    assert torch.equal(written.isnan(), source["lm_head.weight"].isnan()) and written[7, 5] == INF
    assert torch.equal(written.nan_to_num(), source["lm_head.weight"].to(written.dtype).nan_to_num())


def test_the_cli_refusal_is_one_paragraph_with_exit_1(pair, tmp_path):
    target, draft, _ = pair(**EAGLE3)
    poison(draft / "model.safetensors", "lm_head.weight", {(3, 0): NAN})
    run = CliRunner().invoke(main, ["convert", str(draft), "-t", str(target), "-o", str(tmp_path / "out"),
                                    "--to", "vllm"])
    assert run.exit_code == 1 and run.stderr.startswith("error: NaN or Inf") and "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()


def test_nan_fc_bias_with_fold_is_refused(pair, tmp_path):
    target, draft, _ = pair()  # EAGLE-1, pytorch_model.bin with an fc bias
    poison(draft / "pytorch_model.bin", "fc.bias", {(0,): NAN})
    for allow in (False, True):  # a fold spreads the NaN over the whole embedding: never written
        refused(draft, target, tmp_path / "out", errors.NonFiniteError, "fold .* reads non-finite values .*fc.bias: 1",
                to="vllm", fc_bias="fold", allow_nonfinite=allow)


def test_a_fold_of_finite_values_that_overflows_is_refused(pair, tmp_path):
    target, draft, _ = pair()
    tensors = torch.load(draft / "pytorch_model.bin")
    hidden = tensors["fc.bias"].shape[0]
    tensors["fc.weight"][:, :hidden] = torch.eye(hidden) * 1e-5  # W_e^-1 b ~ 1e5 * b: past float16's 65504
    tensors["fc.bias"].fill_(1.0)
    torch.save(tensors, draft / "pytorch_model.bin")
    refused(draft, target, tmp_path / "out", errors.NonFiniteError, "from finite inputs", to="vllm", fc_bias="fold",
            dtype="float16", allow_nonfinite=True)
    eagle_convert.convert(str(draft), str(target), tmp_path / "ok", to="vllm", fc_bias="fold", dtype="float32")


def test_a_cast_that_overflows_is_refused(pair, tmp_path):
    target, draft, _ = pair(**EAGLE3)
    poison(draft / "model.safetensors", "fc.weight", {(0, 0): 1e6})  # finite in float32, Inf in float16
    refused(draft, target, tmp_path / "out", errors.NonFiniteError, "beyond the range of float16", to="vllm",
            dtype="float16", allow_nonfinite=True)


def test_the_fold_report_never_reads_nan_as_exact():
    embed, weight, bias = torch.randn(8, 4), torch.eye(4).repeat(1, 2), torch.randn(4)
    assert fold_fc_bias(embed, weight, bias, torch.float32)[1].max_abs_error < 1e-5  # negative control
    bias[1] = NAN
    report = fold_fc_bias(embed, weight, bias, torch.float32)[1]
    assert math.isnan(report.max_abs_error) and math.isnan(report.max_rel_error)
