"""`eagle-convert bench --target T --draft DFLASH_HEAD` end to end with our runner, on a tiny pair whose head agrees
with its target (testing/dflash.py): lossless, drafts accepted, the same counters and tokens in the z-lab, JetSpec and
speculators layouts; a head whose ids were not translated loses its acceptance; trees are refused by name."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from eagle_convert.cli.main import main
from eagle_convert.testing.dflash import build_dflash_set

PROMPTS = [[1, 17, 42, 99, 5], [1, 200, 3, 77], [1, 9, 9, 120, 64, 31]]


def bench(pair, draft, *extra):
    run = CliRunner().invoke(main, ["bench", "-t", str(pair["target"]), "-d", str(draft), "--prompts",
                                    str(pair["prompts"]), "--max-new-tokens", "24", "--json", *extra])
    return run, (json.loads(run.output) if run.exit_code == 0 else None)


def counts(report: dict) -> list:
    """What must not depend on the layout: per prompt, the acceptance counters, rounds and tokens (no timings)."""
    return [(p["acceptance"], p["accepted_per_round"], p["output_token_ids"]) for p in report["prompts"]]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("dflash-bench")
    made = build_dflash_set(root, agree=True, layers=1)
    made["prompts"] = root / "prompts.jsonl"
    made["prompts"].write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in PROMPTS))
    return made


def test_bench_is_lossless_and_equal_across_layouts(pair):
    reports = {}
    for layout in ("zlab", "jetspec", "speculators"):
        run, reports[layout] = bench(pair, pair[layout])
        assert run.exit_code == 0, run.output
        assert reports[layout]["lossless"]["identical"] is True  # every prompt's tokens equal plain greedy's
    zlab = reports["zlab"]
    assert zlab["settings"]["draft_kind"] == "dflash" and zlab["settings"]["aux_layer_ids"] == [1, 3]
    # the head proposes the target's next token at its first mask, nothing after it (testing/dflash.py)
    acc = zlab["overall"]["acceptance"]
    assert (acc["drafts"], acc["drafted"], acc["accepted"], acc["per_position_rates"]) == (36, 108, 36, [1, 0, 0])
    assert counts(reports["jetspec"]) == counts(zlab) == counts(reports["speculators"])


def test_ids_not_translated_lose_the_acceptance(pair, tmp_path):
    # negative control: target_layer_ids one layer deeper (an input-convention list stored as outputs)
    shifted = tmp_path / "zlab-ids+1"
    shutil.copytree(pair["zlab"], shifted)
    cfg = json.loads((shifted / "config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = [i + 1 for i in cfg["dflash_config"]["target_layer_ids"]]
    (shifted / "config.json").write_text(json.dumps(cfg))
    run, report = bench(pair, shifted)
    assert run.exit_code == 0, run.output
    assert report["lossless"]["identical"] is True and report["overall"]["acceptance"]["accepted"] <= 2


def test_a_tree_is_refused_by_name(pair):
    run, _ = bench(pair, pair["zlab"], "--tree", "dynamic")
    assert run.exit_code == 1 and "DFlash head" in run.output and "--tree chain" in run.output
    assert "Traceback" not in run.output
