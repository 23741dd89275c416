"""Every bad input: a typed error with a hint, exit code 1 and one paragraph from the CLI, and nothing left behind."""

from __future__ import annotations

import json

import pytest
import torch
from support.convert import assert_nothing_left, flat, run_cli, tree_fingerprint

import eagle_convert
from eagle_convert import errors
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target


def mismatched_pair(tmp_path, **target_cfg):
    target_tensors = make_target(tmp_path / "target", TinyConfig(**target_cfg))
    make_eagle1_head(tmp_path / "draft", TinyConfig(), make_target(tmp_path / "t0", TinyConfig()))
    return tmp_path / "draft", tmp_path / "target", target_tensors


@pytest.mark.parametrize("kind,make,match", [
    ("hidden", lambda p: mismatched_pair(p, hidden_size=128), "hidden size"),
    ("vocab", lambda p: mismatched_pair(p, vocab_size=300), "vocab_size"),
])
def test_mismatches(kind, make, match, tmp_path):
    draft, target, _ = make(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(errors.ShapeMismatchError, match=match) as info:
        eagle_convert.convert(str(draft), str(target), out)
    assert info.value.hint
    assert_nothing_left(out)


def test_untied_target_without_lm_head(pair, tmp_path):
    target, draft, tensors = pair()
    from safetensors.torch import save_file

    del tensors["lm_head.weight"]
    save_file(tensors, target / "model.safetensors")
    with pytest.raises(errors.MissingTensorError, match="no lm_head.weight"):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out")
    assert_nothing_left(tmp_path / "out")


def test_corrupt_and_truncated_safetensors(pair, tmp_path):
    target, draft, _ = pair()
    data = (target / "model.safetensors").read_bytes()
    (target / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(errors.CorruptCheckpointError, match="truncated or corrupt"):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out")
    (target / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}" + data[100:])
    with pytest.raises(errors.CorruptCheckpointError, match="not valid JSON"):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out")
    (target / "model.safetensors").write_bytes(b"\xff" * 8 + data[8:])
    with pytest.raises(errors.CorruptCheckpointError, match="impossible header length"):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out")
    assert_nothing_left(tmp_path / "out")


def test_corrupt_pickle_draft(pair, tmp_path):
    target, draft, _ = pair()
    data = (draft / "pytorch_model.bin").read_bytes()
    (draft / "pytorch_model.bin").write_bytes(data[: len(data) // 3])
    with pytest.raises(errors.CorruptCheckpointError, match="cannot be loaded safely"):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out")


def test_unsafe_pickle_is_refused(pair, tmp_path):
    target, draft, _ = pair()

    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    torch.save({"fc.weight": torch.zeros(2), "evil": Payload()}, draft / "pytorch_model.bin")
    result = run_cli("convert", draft, "--target", target, "-o", tmp_path / "out")
    assert result.returncode == 1 and "this must never run" not in result.stdout
    assert "cannot be loaded safely" in flat(result.stderr)


def test_a_pickle_of_objects_is_refused_without_torchs_advice_to_unpickle_it(pair, tmp_path):
    """torch's refusal tells the user to re-run with weights_only=False, which would run the file's code: the message
    says what the file is instead, and how to get tensors out of it safely."""
    target, draft, _ = pair()

    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    torch.save({"fc.weight": torch.zeros(2), "evil": Payload()}, draft / "pytorch_model.bin")
    with pytest.raises(errors.CorruptCheckpointError) as exc:
        eagle_convert.convert(str(draft), str(target), tmp_path / "out")
    text = f"{exc.value.message} {exc.value.hint}"
    assert "weights_only" not in text and "can still be loaded" not in text and "\x1b" not in text
    assert "objects other than tensors" in exc.value.message and "only loads tensors" in exc.value.message
    assert "safetensors" in exc.value.hint and not (tmp_path / "out").exists()


def test_index_naming_a_missing_shard(pair, tmp_path):
    target, draft, _ = pair(shards=3)
    (target / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(errors.CorruptCheckpointError, match="model-00002-of-00003.safetensors"):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out")


def test_out_inside_input_and_out_existing(pair, tmp_path):
    target, draft, _ = pair()
    before = tree_fingerprint(draft)
    with pytest.raises(errors.OutputPathError, match="overlaps"):
        eagle_convert.convert(str(draft), str(target), draft / "converted")
    with pytest.raises(errors.OutputPathError, match="overlaps"):
        eagle_convert.convert(str(draft), str(target), draft, force=True)
    with pytest.raises(errors.OutputPathError, match="overlaps"):
        eagle_convert.convert(str(draft), str(target), tmp_path, force=True)  # OUT would contain the inputs
    assert tree_fingerprint(draft) == before
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(errors.OutputPathError, match="already exists"):
        eagle_convert.convert(str(draft), str(target), out)
    assert (out / "keep.txt").read_text() == "mine"
    eagle_convert.convert(str(draft), str(target), out, force=True)
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").exists()


@pytest.mark.parametrize("exc", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_failure_mid_write_leaves_nothing(pair, tmp_path, monkeypatch, exc):
    target, draft, _ = pair()
    from eagle_convert.conversion import execute

    calls = []
    real = execute._produce

    def failing(planned, checkpoints, result):
        # Every call from the third on fails, so each writer stops at its first tensor after the third, whenever the
        # other one sets the stop flag: at most one per writer, however the threads are scheduled.
        calls.append(planned.name)
        if len(calls) >= 3:
            raise exc
        return real(planned, checkpoints, result)

    monkeypatch.setattr(execute, "_produce", failing)
    out = tmp_path / "new" / "parents" / "out"
    with pytest.raises(type(exc)):
        eagle_convert.convert(str(draft), str(target), out, max_shard_size=20_000)
    assert 3 <= len(calls) <= 4  # two writers: the other one may have started the next tensor
    assert not (tmp_path / "new").exists()  # not even the parent folders it created


def test_failure_with_force_keeps_the_old_output(pair, tmp_path, monkeypatch):
    target, draft, _ = pair()
    out = tmp_path / "out"
    eagle_convert.convert(str(draft), str(target), out)
    before = tree_fingerprint(out)
    from eagle_convert.conversion import execute

    monkeypatch.setattr(execute, "_produce", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        eagle_convert.convert(str(draft), str(target), out, force=True)
    assert tree_fingerprint(out) == before
    assert not list(tmp_path.glob(".out.eagle-convert-*"))


def test_unrecognised_layout(tmp_path, pair):
    target, _, _ = pair()
    with pytest.raises(errors.LayoutError, match="not in a draft layout we recognise"):
        eagle_convert.convert(str(target), str(target), tmp_path / "out")  # a target passed as the draft


def test_cli_errors_are_one_paragraph_with_exit_1(pair, tmp_path):
    target, draft, _ = pair()
    (tmp_path / "out").mkdir()
    result = run_cli("convert", draft, "--target", target, "-o", tmp_path / "out")
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert "\n\n" not in result.stderr.strip() and "--force" in flat(result.stderr)
    as_json = run_cli("convert", draft, "--target", target, "-o", tmp_path / "out", "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["error"] == "OutputPathError"


def test_cli_usage_errors_exit_2(pair, tmp_path):
    target, draft, _ = pair()
    assert run_cli("convert", draft, "--target", target).returncode == 2  # no -o
    assert run_cli("convert", draft, "--target", target, "-o", tmp_path / "o", "--to", "nope").returncode == 2
    assert run_cli("convert", draft, "--target", target, "-o", tmp_path / "o",
                   "--max-shard-size", "lots").returncode == 2


def test_debug_env_shows_traceback(pair, tmp_path):
    import os

    target, draft, _ = pair()
    (tmp_path / "out").mkdir()
    result = run_cli("convert", draft, "--target", target, "-o", tmp_path / "out",
                     env={**os.environ, "EAGLE_CONVERT_DEBUG": "1"})
    assert result.returncode == 1 and "Traceback" in result.stderr


def test_a_paragraph_never_breaks_a_hyphenated_word():
    """Where the line breaks depends on what precedes (a temporary path's length): a word split at its hyphen, or
    a label left alone on its line before a long path, made message tests pass or fail by path length. The label
    starts the first line, words stay whole, paths and flags copyable."""
    from eagle_convert.cli.exit_codes import paragraph

    for width in range(1, 140):
        text = paragraph(f"error: /tmp/{'x' * width} is saved per tensor-parallel rank; see /tmp/eagle-convert-dir.")
        words = text.split()
        assert text.startswith("error: /tmp/x") and "tensor-parallel" in words and "/tmp/eagle-convert-dir." in words
        assert all(len(line) <= 100 or " " not in line[7:] for line in text.splitlines())
