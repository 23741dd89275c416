"""vocab-map convert and check: every storage format round-trips bit-exactly; every silent-failure class is found by
name, refused with exit 1 and one paragraph, nothing written; a map written into a head moves its LM-head rows so
the head's draft distribution over target ids is unchanged; re-pruning a trained head is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from eagle_convert.cli.main import main
from eagle_convert.testing.tiny import TinyConfig, make_eagle3_head, make_target
from eagle_convert.vocab.formats import FORMATS, read_stored
from eagle_convert.vocab.map import VocabMap

VOCAB = 1000
IDS = tuple(sorted(torch.randperm(VOCAB, generator=torch.Generator().manual_seed(0))[:50].tolist()))
CFG = TinyConfig(vocab_size=128, num_hidden_layers=8)


def run_cli(*args):
    result = CliRunner().invoke(main, ["vocab-map", *map(str, args)], catch_exceptions=False)
    return result


def _write(vmap: VocabMap, fmt: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    FORMATS[fmt].write(vmap, folder)
    return folder / FORMATS[fmt].file_names(vmap.draft_vocab_size)[0]


def _tensors(path: Path, fmt: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    stored = read_stored(path, fmt)
    return stored.d2t, stored.t2d


@pytest.mark.parametrize("there", list(FORMATS))
@pytest.mark.parametrize("start", ["specforge", "speculators", "safetensors"])
def test_every_format_round_trips_bit_exactly(start, there, tmp_path):
    first = _write(VocabMap(IDS, VOCAB), start, tmp_path / "a")
    run = run_cli("convert", first, "--format", there, "-o", tmp_path / "b")  # the vocab comes from t2d
    assert run.exit_code == 0, run.output
    middle = tmp_path / "b" / FORMATS[there].file_names(len(IDS))[0]
    back = run_cli("convert", middle, "--format", start, "-o", tmp_path / "c", "--from", there,
                   "--target-vocab-size", VOCAB)
    assert back.exit_code == 0, back.output
    again = tmp_path / "c" / FORMATS[start].file_names(len(IDS))[0]
    (d2t, t2d), (d2t2, t2d2) = _tensors(first, start), _tensors(again, start)
    assert d2t.dtype == d2t2.dtype == torch.int64 and t2d.dtype == t2d2.dtype == torch.bool
    assert torch.equal(d2t, d2t2) and torch.equal(t2d, t2d2)
    assert tuple((d2t + torch.arange(len(IDS))).tolist()) == IDS  # negative control: the map is the one written
    if start != "specforge":  # .npy and safetensors files are byte-for-byte reproducible; torch's zip is not
        assert all(a.read_bytes() == b.read_bytes() for a, b in zip(sorted((tmp_path / "a").iterdir()),
                                                                     sorted((tmp_path / "c").iterdir())))


def test_frequency_order_survives_the_formats_that_keep_it(tmp_path):
    frequency = VocabMap(tuple(reversed(IDS)), VOCAB)
    first = _write(frequency, "modelopt", tmp_path / "a")
    for fmt in ("sglang", "safetensors", "modelopt"):
        out = tmp_path / fmt
        assert run_cli("convert", first, "--format", fmt, "-o", out, "--target-vocab-size", VOCAB).exit_code == 0
        d2t, _ = _tensors(out / FORMATS[fmt].file_names(len(IDS))[0], fmt)
        assert VocabMap.from_d2t(d2t, VOCAB).target_ids == frequency.target_ids


def _specforge_file(tmp_path: Path, d2t: torch.Tensor, t2d: torch.Tensor) -> Path:
    path = tmp_path / "vocab_mapping.pt"
    torch.save({"d2t": d2t, "t2d": t2d}, path)
    return path


def _good() -> tuple[torch.Tensor, torch.Tensor]:
    vmap = VocabMap(IDS, VOCAB)
    return vmap.d2t(), vmap.t2d()


def _dup(d2t, t2d):
    d2t = d2t.clone()
    d2t[1] = d2t[0] - 1  # draft ids 0 and 1 both map to target id IDS[0]
    return d2t, t2d


def _disagree(d2t, t2d):
    t2d = t2d.clone()
    t2d[torch.nonzero(~t2d)[0]] = True
    return d2t, t2d


def _out_of_range(d2t, t2d):
    d2t = d2t.clone()
    d2t[-1] += VOCAB
    return d2t, t2d


@pytest.mark.parametrize("damage, name", [
    (_dup, "duplicates"), (_disagree, "t2d-disagrees"), (_out_of_range, "out-of-range"),
    (lambda d2t, t2d: (d2t, t2d[:900]), "t2d-size"),  # sized by a tokenizer, not the config vocabulary
    (lambda d2t, t2d: (d2t.float(), t2d), "bad-dtype"),
])
def test_broken_map_files_are_refused_by_name(damage, name, tmp_path):
    good = _specforge_file(tmp_path, *_good())
    assert run_cli("check", good, "--target-vocab-size", VOCAB).exit_code == 0  # negative control
    path = _specforge_file(tmp_path, *damage(*_good()))
    check = run_cli("check", path, "--target-vocab-size", VOCAB)
    assert check.exit_code == 1 and f"error: {name}:" in check.output
    out = tmp_path / "out"
    run = run_cli("convert", path, "--format", "safetensors", "-o", out, "--target-vocab-size", VOCAB)
    assert run.exit_code == 1 and name in run.stderr and not out.exists()
    assert len([line for line in run.stderr.splitlines() if line.startswith("error:")]) == 1  # one paragraph


def test_non_ascending_map_is_refused_for_an_ascending_consumer(tmp_path):
    path = _write(VocabMap(tuple(reversed(IDS)), VOCAB), "modelopt", tmp_path / "a")
    for fmt in ("specforge", "speculators"):
        run = run_cli("convert", path, "--format", fmt, "-o", tmp_path / fmt, "--target-vocab-size", VOCAB)
        assert run.exit_code == 1 and "not-ascending" in run.stderr and "--apply-to" in run.stderr
        assert not (tmp_path / fmt).exists()
    check = run_cli("check", path, "--target-vocab-size", VOCAB)
    assert check.exit_code == 0 and "note: not-ascending" in check.output  # reported, not an error by itself


def test_modelopt_map_needs_the_vocab_size_flag(tmp_path):
    path = _write(VocabMap(IDS, VOCAB), "modelopt", tmp_path / "a")
    run = run_cli("convert", path, "--format", "specforge", "-o", tmp_path / "out")
    assert run.exit_code == 1 and "--target-vocab-size" in run.stderr and not (tmp_path / "out").exists()
    ambiguous = tmp_path / "ids.pt"
    torch.save(torch.tensor(IDS), ambiguous)
    run = run_cli("convert", ambiguous, "--format", "specforge", "-o", tmp_path / "out")
    assert run.exit_code == 1 and "--from modelopt or --from sglang" in run.stderr


def test_pickled_code_is_never_run(tmp_path):
    path = tmp_path / "vocab_mapping.pt"
    torch.save({"d2t": torch.zeros(3, dtype=torch.int64), "t2d": torch.ones(3, dtype=torch.bool), "x": Path("/")},
               path)
    run = run_cli("convert", path, "--format", "safetensors", "-o", tmp_path / "out")
    assert run.exit_code == 1 and "weights_only=True" in run.stderr


def _sglang_file(tmp_path: Path, ids) -> Path:
    path = tmp_path / "token_map.pt"
    torch.save(ids, path)
    return path


NO_TARGET_ERRORS = {  # a map file, the error finding `check` must name with no target vocabulary given
    "negative_id": (lambda p: _sglang_file(p, [-1, 5, 9]), "out-of-range", "e.g. to target id -1"),
    "id_2_62": (lambda p: _sglang_file(p, [3, 2 ** 62]), "out-of-range", "any plausible target vocabulary"),
    "duplicates": (lambda p: _sglang_file(p, [4, 9, 4]), "duplicates", "onto target ids"),
    "t2d_shorter_than_d2t": (lambda p: _specforge_file(p, torch.zeros(8, dtype=torch.int64),
                                                       torch.ones(4, dtype=torch.bool)), "t2d-size", "fewer than"),
    "float_t2d": (lambda p: _specforge_file(p, torch.zeros(3, dtype=torch.int64), torch.tensor([1.0, 1, 1, 0])),
                  "bad-dtype", "t2d is torch.float32"),
    "int_t2d_not_0_1": (lambda p: _specforge_file(p, torch.zeros(3, dtype=torch.int64), torch.tensor([1, 2, 1, 0])),
                        "bad-dtype", "values other than 0 and 1"),
}


@pytest.mark.parametrize("case", list(NO_TARGET_ERRORS))
def test_check_without_a_target_finds_what_no_vocabulary_holds(case, tmp_path):
    assert run_cli("check", _specforge_file(tmp_path, *_good())).exit_code == 0  # negative control
    make, name, says = NO_TARGET_ERRORS[case]
    path = make(tmp_path)
    check = run_cli("check", path)
    assert check.exit_code == 1 and f"error: {name}:" in check.output and says in " ".join(check.output.split())
    out = tmp_path / "out"
    run = run_cli("convert", path, "--format", "modelopt", "-o", out)
    assert run.exit_code == 1 and f"{name}: " in run.stderr and not out.exists()


def test_a_t2d_length_stands_for_the_vocab_only_with_a_note(tmp_path):
    """Without a target, a self-consistent 4-entry t2d is all the map says of the vocabulary: reported, and refused
    once the config vocabulary is given."""
    path = _specforge_file(tmp_path, torch.zeros(3, dtype=torch.int64), torch.tensor([True, True, True, False]))
    alone = run_cli("check", path, "--json")
    assert alone.exit_code == 0
    data = json.loads(alone.output)
    assert data["vocab_size"] == 4 and [f["name"] for f in data["findings"]] == ["vocab-unconfirmed"]
    given = run_cli("check", path, "--target-vocab-size", VOCAB)
    assert given.exit_code == 1 and f"error: t2d-size: t2d has 4 entries but the config vocabulary is {VOCAB}" \
        in " ".join(given.output.split())
    assert "vocab-unconfirmed" not in given.output


def test_an_integer_t2d_is_a_note_and_convert_says_it_writes_bool(tmp_path):
    d2t, t2d = _good()
    path = _specforge_file(tmp_path, d2t, t2d.to(torch.int64))
    for given in ([], ["--target-vocab-size", VOCAB]):
        check = run_cli("check", path, *given)
        assert check.exit_code == 0 and "note: t2d-not-bool: t2d is a torch.int64 0/1 mask" in check.output
    run = run_cli("convert", path, "--format", "specforge", "-o", tmp_path / "out", "--target-vocab-size", VOCAB)
    assert run.exit_code == 0 and "write it as bool" in " ".join(run.output.split())
    d2t2, t2d2 = _tensors(tmp_path / "out" / FORMATS["specforge"].file_names(len(IDS))[0], "specforge")
    assert t2d2.dtype == torch.bool and torch.equal(t2d2, t2d) and torch.equal(d2t2, d2t)
    assert "t2d-not-bool" not in run_cli("check", _specforge_file(tmp_path, d2t, t2d)).output  # bool: no note


def _zero_bytes(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def _saved(path: Path, value) -> Path:
    torch.save(value, path)
    return path


def _npy(path: Path, array) -> Path:
    numpy.save(path, array)
    return path


UNREADABLE = {  # a file in each format that holds nothing or the wrong kind of thing, what the refusal says
    "empty_pt": (lambda p: _zero_bytes(p / "vocab_mapping.pt"), "is empty (0 bytes)"),
    "empty_npy": (lambda p: _zero_bytes(p / "d2t-3.npy"), "is empty (0 bytes)"),
    "empty_safetensors": (lambda p: _zero_bytes(p / "vocab_map-3.safetensors"), "is empty (0 bytes)"),
    "float_list": (lambda p: _saved(p / "token_map.pt", [1.0, 2.5]),
                   "a list of 2 values, 2 of them float (e.g. 1.0): a list of integer target ids was expected"),
    "bool_list": (lambda p: _saved(p / "token_map.pt", [True, False]), "2 of them bool"),
    "int": (lambda p: _saved(p / "token_map.pt", 5), "holds a Python int, not a map"),
    "dict_with_a_list": (lambda p: _saved(p / "vocab_mapping.pt", {"d2t": [0, 0]}), "its 'd2t' is a list, not a"),
    "string_npy": (lambda p: _npy(p / "d2t-2.npy", numpy.array(["a", "b"])), "not a plain .npy array of numbers"),
}


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_odd_map_files_say_what_is_wrong(case, tmp_path):
    make, says = UNREADABLE[case]
    path = make(tmp_path)
    for args in (["check", path], ["convert", path, "--format", "sglang", "-o", tmp_path / "out"]):
        run = run_cli(*args)
        assert run.exit_code == 1 and says in " ".join(run.stderr.split()), run.output
        assert run.stderr.startswith("error: ") and run.stderr.count("error:") == 1 and "Traceback" not in run.output
    assert not (tmp_path / "out").exists()


# --- heads -----------------------------------------------------------------------------------------------------------

@pytest.fixture()
def head(tmp_path):
    target = make_target(tmp_path / "target", CFG)
    tensors = make_eagle3_head(tmp_path / "head", CFG, target, draft_vocab=16)
    return tmp_path / "head", tensors


def _frequency_head(tmp_path: Path, head_dir: Path, tensors: dict) -> tuple[Path, torch.Tensor]:
    """The same head saved the ModelOpt/NeMo way: draft ids in another (frequency) order, rows moved with them."""
    order = torch.randperm(16, generator=torch.Generator().manual_seed(3))
    ids = (tensors["d2t"] + torch.arange(16))[order]
    out = tmp_path / "freq"
    out.mkdir()
    moved = {**tensors, "lm_head.weight": tensors["lm_head.weight"][order].contiguous(),
             "d2t": ids - torch.arange(16)}
    save_file(moved, out / "model.safetensors")
    (out / "config.json").write_text((head_dir / "config.json").read_text())
    return out, ids


def _distribution(folder: Path, hidden: torch.Tensor) -> torch.Tensor:
    t = load_file(folder / "model.safetensors")
    probs = torch.softmax(hidden @ t["lm_head.weight"].T, dim=-1)
    full = torch.zeros(hidden.shape[0], CFG.vocab_size)
    full[:, t["d2t"] + torch.arange(t["d2t"].numel())] = probs
    return full


def test_applying_an_ascending_order_permutes_the_rows(head, tmp_path):
    head_dir, tensors = head
    freq, ids = _frequency_head(tmp_path, head_dir, tensors)
    hidden = torch.randn(5, CFG.hidden_size, generator=torch.Generator().manual_seed(1))
    check = run_cli("check", freq)
    assert check.exit_code == 0 and "not-ascending" in check.output
    torch.save(ids - torch.arange(16), tmp_path / "d2t.pt")
    out = tmp_path / "ascending"
    run = run_cli("convert", tmp_path / "d2t.pt", "--format", "specforge", "--apply-to", freq, "-o", out,
                  "--target-vocab-size", CFG.vocab_size)
    assert run.exit_code == 0 and "permuted" in run.output, run.output
    written = load_file(out / "model.safetensors")
    assert torch.equal(written["lm_head.weight"], tensors["lm_head.weight"])  # back to the trainer's order
    assert torch.equal(written["d2t"], tensors["d2t"]) and torch.equal(written["t2d"], tensors["t2d"])
    before, after = _distribution(freq, hidden), _distribution(out, hidden)
    assert torch.allclose(after, before, atol=1e-7, rtol=1e-6)  # softmax sums in another order: last bits only
    assert torch.equal(after.argmax(-1), before.argmax(-1))  # the same greedy draft token
    unmoved = {**load_file(out / "model.safetensors"), "d2t": ids - torch.arange(16)}  # rows NOT permuted: control
    save_file(unmoved, tmp_path / "unmoved.safetensors")
    (tmp_path / "control").mkdir()
    (tmp_path / "control" / "model.safetensors").write_bytes((tmp_path / "unmoved.safetensors").read_bytes())
    assert not torch.allclose(_distribution(tmp_path / "control", hidden), before, atol=1e-3)
    assert run_cli("check", out).exit_code == 0 and json.loads((out / "config.json").read_text())[
        "draft_vocab_size"] == 16
    # the map alone (no head) cannot be sorted into an ascending format: that would re-point every row
    assert run_cli("convert", tmp_path / "d2t.pt", "--format", "specforge", "-o", tmp_path / "x",
                   "--target-vocab-size", CFG.vocab_size).exit_code == 1


def test_repruning_a_trained_head_is_refused(head, tmp_path):
    head_dir, tensors = head
    ids = (tensors["d2t"] + torch.arange(16)).tolist()
    other = VocabMap(tuple(sorted({*ids[1:], next(i for i in range(128) if i not in ids)})), CFG.vocab_size)
    path = _write(other, "specforge", tmp_path / "m")
    run = run_cli("convert", path, "--format", "specforge", "--apply-to", head_dir, "-o", tmp_path / "out")
    assert run.exit_code == 1 and "fixed by training" in run.stderr and not (tmp_path / "out").exists()
    same = _write(VocabMap(tuple(ids), CFG.vocab_size), "specforge", tmp_path / "same")
    ok = run_cli("convert", same, "--format", "specforge", "--apply-to", head_dir, "-o", tmp_path / "out")
    assert ok.exit_code == 0 and "already in this order" in ok.output  # negative control: the same ids apply


@pytest.mark.parametrize("damage, name", [
    (lambda t, c: t.pop("d2t"), "missing-d2t"),
    (lambda t, c: c.update(draft_vocab_size=17), "draft-size"),
    (lambda t, c: t.update(t2d=t["t2d"][:100].clone()), "t2d-size"),
])
def test_broken_heads_are_reported_by_name(damage, name, head, tmp_path):
    head_dir, _ = head
    assert run_cli("check", head_dir).exit_code == 0
    t, config = load_file(head_dir / "model.safetensors"), json.loads((head_dir / "config.json").read_text())
    damage(t, config)
    save_file(t, head_dir / "model.safetensors")
    (head_dir / "config.json").write_text(json.dumps(config))
    check = run_cli("check", head_dir)
    assert check.exit_code == 1 and f"error: {name}:" in check.output


def test_check_uses_the_targets_text_config_vocab(head, tmp_path):
    head_dir, _ = head
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text(json.dumps({"vocab_size": 999, "text_config": {"vocab_size": CFG.vocab_size}}))
    assert run_cli("check", head_dir, "--target-vocab-size", CFG.vocab_size).exit_code == 0
    assert run_cli("check", head_dir, "--target", vlm).exit_code == 0
    padded = run_cli("check", head_dir, "--target-vocab-size", CFG.vocab_size + 64)
    assert padded.exit_code == 1 and "t2d-size" in padded.output


def test_npy_pairs_are_read_without_pickles(tmp_path):
    _write(VocabMap(IDS, VOCAB), "speculators", tmp_path)
    numpy.save(tmp_path / "t2d-50.npy", numpy.array([object()], dtype=object), allow_pickle=True)
    run = run_cli("convert", tmp_path / "d2t-50.npy", "--format", "safetensors", "-o", tmp_path / "out")
    assert run.exit_code == 1 and "not a plain .npy" in run.stderr


def test_inspect_reports_the_same_findings(head, tmp_path):
    import eagle_convert

    head_dir, tensors = head
    freq, _ = _frequency_head(tmp_path, head_dir, tensors)
    report = eagle_convert.inspect(str(freq))
    assert [f["name"] for f in report.vocab_map] == ["not-ascending"]
    assert any(n.startswith("vocab map not-ascending") for n in report.notes)
    assert eagle_convert.inspect(str(head_dir)).vocab_map == []  # negative control: the trainer's head is clean
    t = load_file(head_dir / "model.safetensors")
    t["t2d"] = _disagree(t["d2t"], t["t2d"])[1]
    save_file(t, head_dir / "model.safetensors")
    problems = [p.what for p in eagle_convert.inspect(str(head_dir)).problems]
    assert any(p.startswith("Vocab map t2d-disagrees") for p in problems)
