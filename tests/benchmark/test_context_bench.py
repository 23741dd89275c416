"""bench --context-lengths: the cliff at the draft's position limit (drafting off past it, as vLLM 0.32 does), its
removal after convert raises the limit, lossless in every bucket, the report's context block, the SVG plot, and the
documents file's refusals."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner
from support.documents import write_documents

import eagle_convert
from eagle_convert.benchmark.context import parse_lengths
from eagle_convert.benchmark.documents import DocumentsError, builtin_documents
from eagle_convert.cli.main import main
from eagle_convert.runner.draft_gate import draft_position_limit
from eagle_convert.settings.bench import ContextSettings
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target

K, LIMIT, MAX_NEW = 3, 128, 24
LENGTHS = (64, 112, 160, 224)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A head that agrees with its target (τ = k+1 while it drafts), its config limited to 128 positions, and the
    same head converted (convert raises the limit to the target's 4096)."""
    root = tmp_path_factory.mktemp("context")
    cfg = TinyConfig(num_hidden_layers=1)
    tensors = make_target(root / "target", cfg, zero_attention=True)
    make_eagle1_head(root / "short", cfg, tensors, agree=True, fc_bias=False)
    config = json.loads((root / "short" / "config.json").read_text())
    (root / "short" / "config.json").write_text(json.dumps({**config, "max_position_embeddings": LIMIT}))
    eagle_convert.convert(str(root / "short"), str(root / "target"), root / "converted", to="vllm")
    return {"target": root / "target", "short": root / "short", "converted": root / "converted",
            "documents": write_documents(root / "docs.jsonl")}


def context_bench(pair, draft, **kw):
    context = ContextSettings(LENGTHS, pair["documents"], kw.pop("per_bucket", 2), kw.pop("plot", None))
    return eagle_convert.bench(str(pair["target"]), str(draft), k=K, max_new_tokens=MAX_NEW, ignore_eos=True,
                               context=context, device="cpu", dtype="float32", **kw)


def test_the_cliff_at_the_draft_limit_and_its_removal_after_convert(pair):
    short = context_bench(pair, pair["short"]).to_dict()
    buckets = {b["length"]: b for b in short["context"]["buckets"]}
    assert short["context"]["draft_position_limit"] == LIMIT
    assert [b["prompt_tokens"] for b in buckets.values()] == [[n, n] for n in LENGTHS]  # exactly n prompt tokens
    # 64: every round drafts, and the agreeing head has every draft accepted
    assert buckets[64]["acceptance"]["mean_acceptance_length"] == K + 1
    assert buckets[64]["drafting_disabled_rounds"] == 0
    # 112: rounds at 112..124 draft (4 tokens each); after the round at 124 the target holds 128 tokens and
    # 128 + k > 128: the other 24 - 17 tokens come one per round, from dummy drafts
    assert buckets[112]["drafting_disabled_rounds"] == 2 * 7 and buckets[112]["acceptance"]["drafts"] == 2 * 11
    for n in (160, 224):  # past the limit: never drafts, every round verifies dummy drafts, τ 1
        assert buckets[n]["drafting_disabled_share"] == 1.0
        assert buckets[n]["acceptance"]["mean_acceptance_length"] == 1.0
        assert buckets[n]["all_rejected_share"] == 1.0
    assert all(b["lossless"] == {"checked": True, "identical": True, "diverged_prompts": []}
               for b in buckets.values())

    converted = context_bench(pair, pair["converted"]).to_dict()
    assert converted["context"]["draft_position_limit"] == 4096
    for bucket in converted["context"]["buckets"]:  # the cliff is gone
        assert bucket["acceptance"]["mean_acceptance_length"] == K + 1, bucket["label"]
        assert bucket["drafting_disabled_rounds"] == 0 and bucket["lossless"]["identical"] is True
    # the same outputs either way: drafting changes speed, never text
    assert [p["output_token_ids"] for p in converted["prompts"]] == [p["output_token_ids"] for p in short["prompts"]]


def test_context_block_schema_and_reference_curve(pair, tmp_path):
    plot = tmp_path / "curve.svg"
    report = context_bench(pair, pair["converted"], plot=plot, reference_draft=str(pair["short"]))
    data = json.loads(json.dumps(report.to_dict()))  # JSON-clean
    assert data["schema_version"] == 4
    context = data["context"]
    assert set(context) == {"lengths", "documents_per_bucket", "documents", "protocol", "draft_position_limit",
                            "buckets", "reference"}
    assert context["lengths"] == list(LENGTHS) and context["documents"]["ids"] == ["doc0", "doc1"]
    assert context["protocol"] == {"kept": "start", "chat_template": True, "questions": ["t5 t6 t7"]}
    bucket = context["buckets"][0]
    assert set(bucket) == {"label", "length", "prompts", "prompt_tokens", "acceptance", "drafting_disabled_rounds",
                           "drafting_disabled_share", "all_rejected_share", "draft_vocab_coverage",
                           "generated_tokens", "lossless"}
    assert bucket["draft_vocab_coverage"] is None  # an EAGLE-1 head has no draft vocabulary map
    assert bucket["acceptance"]["histogram"] == [0, 0, 0, 6 * 2]
    assert context["reference"]["draft_position_limit"] == LIMIT
    assert [b["acceptance"]["mean_acceptance_length"] for b in context["reference"]["buckets"]][2:] == [1.0, 1.0]
    assert all(p["drafting_disabled_rounds"] == 0 for p in data["prompts"])
    # the gate compares the heads where both drafted: past 128 only the converted head does, by design
    (gate,) = data["gate"]["checks"]
    assert gate["passed"] and gate["prompts_compared"] == ["64/doc0", "64/doc1"], gate["message"]

    svg = ET.parse(plot).getroot()
    points = [e for e in svg.iter("{http://www.w3.org/2000/svg}circle") if e.get("class") == "point"]
    # per head: τ and k positions, one point per bucket; the draft and the reference
    assert len(points) == 2 * (1 + K) * len(LENGTHS)
    assert {p.get("data-series") for p in points} >= {"draft τ", "reference τ", "reference position 3"}


def test_cli_table_json_and_refusals(pair, tmp_path):
    common = ["bench", "--target", pair["target"], "--draft", pair["short"], "-k", K, "--max-new-tokens", MAX_NEW,
              "--ignore-eos", "--dtype", "float32", "--device", "cpu", "--documents", pair["documents"],
              "--documents-per-bucket", 1, "--context-lengths", "64,160"]
    result = CliRunner().invoke(main, list(map(str, common)), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "draft position limit: 128" in result.output
    assert any(line.split()[:2] == ["draft", "160"] and "100%" in line for line in result.output.splitlines())

    short_docs = tmp_path / "short.jsonl"
    short_docs.write_text(json.dumps({"id": "tiny-one", "text": "t3 t4 t5"}) + "\n"
                          + json.dumps({"id": "long-one", "text": " ".join(["t9"] * 400)}) + "\n")
    refused = CliRunner().invoke(main, list(map(str, [*common[:-4], "--documents", short_docs,
                                                      "--documents-per-bucket", 2, "--context-lengths", "64,160"])))
    assert refused.exit_code == 1
    assert "tiny-one" in refused.output and "long-one" not in refused.output

    png = CliRunner().invoke(main, list(map(str, [*common, "--plot", tmp_path / "x.gif"])))
    assert png.exit_code != 0 and "svg" in png.output and not (tmp_path / "x.gif").exists()


def test_lengths_parse_and_the_limit_rule_reads_the_config_as_vllm():
    assert parse_lengths("1k,2k,4k,8k") == (1000, 2000, 4000, 8000)
    assert parse_lengths("512, 1024") == (512, 1024)
    for bad in ("2k,1k", "1k,1k", "x", "0", ""):
        with pytest.raises(ValueError):
            parse_lengths(bad)
    assert draft_position_limit({"max_position_embeddings": 2048}, 8192) == 2048
    assert draft_position_limit({"max_position_embeddings": 2048}, 1024) == 1024  # capped by the target's
    assert draft_position_limit({}, 8192) == 8192  # no key: vLLM takes the target's
    assert draft_position_limit({"max_position_embeddings": 2048, "rope_scaling": {"rope_type": "linear",
                                                                                    "factor": 2.0}}, None) == 4096
    assert draft_position_limit({"max_position_embeddings": 2048, "rope_scaling": {"rope_type": "yarn",
                                                                                    "factor": 4.0}}, None) == 2048


def test_the_builtin_corpus_is_long_deterministic_and_offline():
    documents, provenance = builtin_documents()
    assert len(documents) >= 6 and "PSF" in provenance
    assert all(len(d.text) >= 48_000 for d in documents)
    assert [d.sha256 for d in builtin_documents()[0]] == [d.sha256 for d in documents]


def test_a_broken_documents_file_is_refused_by_line(tmp_path):
    from eagle_convert.benchmark.documents import load_documents

    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1, "text": "fine"}\n{"id": 2}\n')
    with pytest.raises(DocumentsError, match="line 2"):
        load_documents(path)


def test_png_without_matplotlib_is_refused_before_any_work(monkeypatch, tmp_path):
    import sys

    from eagle_convert.benchmark.plot import PlotError, check_plot_path

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(PlotError, match="matplotlib") as refused:
        check_plot_path(tmp_path / "curve.png")
    assert ".svg" in refused.value.hint
    check_plot_path(tmp_path / "curve.svg")  # SVG needs nothing
