"""The input fuzzer on every surface a user hands files to (issue 33; support/fuzz_family.py): vocab maps, texts
(prompts, corpora, documents), MTP targets, stored reports and DFlash heads. Per family: a short seeded run (every
failure it finds must be one a helper's fix under way owns: support/fuzz_known.py, empty now), a negative control
(the check the family exercises disabled: the fuzzer reports failures), and the cases of issue 29 (and what the
fuzzer found) as explicit seeds. `make fuzz` runs the long ones (marker `fuzz`: FUZZ_N per surface, FUZZ_SURFACE to
pick some)."""

from __future__ import annotations

import os

import pytest
import torch
from support import fuzz_dflash, fuzz_maps, fuzz_mtp, fuzz_reports, fuzz_texts
from support.fuzz_family import Family, fuzz_family, run_named
from support.fuzz_known import KNOWN_SEEDS, by_owner, unowned

FAMILIES = {"maps": fuzz_maps, "texts": fuzz_texts, "mtp": fuzz_mtp, "reports": fuzz_reports, "dflash": fuzz_dflash}
SHORT = {"maps": 24, "texts": 14, "mtp": 6, "reports": 12, "dflash": 12}  # each short run < ~20 s on the 2-core machine


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    """Each family's fixtures, built once (the MTP targets take a few seconds)."""
    built = {}

    def get(name: str):
        if name not in built:
            built[name] = FAMILIES[name].FAMILY.build(tmp_path_factory.mktemp(f"fuzz-{name}"))
        return built[name]
    return get


def quiet(line: str) -> None:
    pass


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_short_seeded_run_finds_nothing_unowned(name, fixtures, tmp_path):
    summary = fuzz_family(FAMILIES[name].FAMILY, SHORT[name], seed=7, workdir=tmp_path, echo=quiet,
                          fixtures=fixtures(name))
    assert unowned(summary) == [], by_owner(summary)
    assert summary["runs"] == SHORT[name] and summary["refused"] >= 1 and summary["accepted"] >= 1  # both sides


def lenient_prompt(item, number):
    from eagle_convert.benchmark.prompts import Prompt

    return Prompt(str(number), ("t5 t6",))


def unchecked_scales(refs, block, names, *whose):  # (main's signature has grown a `whose` argument)
    """locate._check_scales without its checks: each FP8 weight -> its scale, whatever the scale's shape or dtype."""
    return {n: n + "_scale_inv" for n, ref in refs.items() if ref.dtype == torch.float8_e4m3fn and
            n + "_scale_inv" in names}


# family: (what is disabled, module.attribute, its stand-in, the damage it let through: a mutation, given only
# the commands that refuse it correctly today, so the failures come from the disabled check alone)
CONTROLS = {
    "maps": ("the one map check of bench / convert --token-map", "eagle_convert.vocab.token_map.check_map",
             lambda facts: [], lambda rng, fx, folder: fuzz_maps.bad_ids(rng, fx, folder, rng.choice(["bench",
                                                                                                     "convert"]))),
    "texts": ("bench's prompt row check", "eagle_convert.benchmark.prompts._prompt", lenient_prompt,
              lambda rng, fx, folder: fuzz_texts.command(rng, fx, folder, fuzz_texts.write(
                  folder, "prompts", '{"prompt": 5}\n'), "prompts", "prompt 5", which="bench")),
    "mtp": ("the FP8 block-scale check", "eagle_convert.mtp.locate._check_scales",
            unchecked_scales,
            lambda rng, fx, folder: fuzz_mtp.shard_tensors(rng, fx, folder, rng.choice(["scale-shape", "scale-dtype"]),
                                                           "deepseek_v3", rng.choice(["convert", "convert-sglang"]))),
    "dflash": ("the DFlash layer-id type check", "eagle_convert.draft.dflash_head._integer", lambda value: True,
               lambda rng, fx, folder: fuzz_dflash.seed_ids(rng.choice(["zlab", "jetspec"]), ["0", "2"],
                                                            rng.choice(fuzz_dflash.LAYOUTS))(rng, fx, folder)),
    "reports": ("the stored report's number check", "eagle_convert.benchmark.entry._finite_float", float,
                fuzz_reports.nan_tau),
}


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_the_fuzzer_reports_a_failure_when_the_check_is_disabled(name, fixtures, tmp_path, monkeypatch):
    what, attribute, stand_in, mutation = CONTROLS[name]
    family = Family(name, FAMILIES[name].FAMILY.build, {"control": mutation})
    clean = fuzz_family(family, 4, seed=7, workdir=tmp_path, echo=quiet, fixtures=fixtures(name))
    assert clean["failures"] == [] and clean["refused"] == 4, clean  # the same runs, the check on: refused
    monkeypatch.setattr(attribute, stand_in)  # the forked runs inherit it
    if name == "reports":
        monkeypatch.setattr("eagle_convert.benchmark.entry._not_a_number", float)
    summary = fuzz_family(family, 4, seed=7, workdir=tmp_path, echo=quiet, fixtures=fixtures(name))
    assert summary["failures"], f"with {what} disabled the fuzzer found nothing: {summary}"


def seed_cases():
    for name, module in FAMILIES.items():
        for seed in getattr(module, "SEEDS", {}):
            marks = []
            if seed in KNOWN_SEEDS:
                who, runs = KNOWN_SEEDS[seed]
                marks = [pytest.mark.xfail(strict=True, run=runs, reason=f"issue 29, fixed by {who}")]
            yield pytest.param(name, seed, id=seed, marks=marks)


@pytest.mark.parametrize("name, seed", list(seed_cases()))
def test_the_seeded_cases_are_refused_cleanly_or_read_faithfully(name, seed, fixtures, tmp_path):
    """Within 60 s and the memory bound: a refusal in one paragraph, or (a 2M-token line kept to --max-length,
    `inspect` reporting a config's impossible count) a faithful result."""
    family = FAMILIES[name].FAMILY
    family = Family(family.name, family.build, FAMILIES[name].SEEDS)
    outcome, what, failure = run_named(family, seed, fixtures(name), tmp_path, seconds=60)
    assert failure is None and outcome in ("refused", "accepted"), f"{what}: {outcome}: {failure}"


@pytest.mark.fuzz
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_long_run_finds_nothing(name, tmp_path):
    """`make fuzz`: FUZZ_N runs per surface from FUZZ_SEED (1000 from 0), or the one run FUZZ_ONLY replays;
    FUZZ_SURFACE=maps,texts picks surfaces (convert: tests/conversion/test_fuzz.py)."""
    picked = os.environ.get("FUZZ_SURFACE", "")
    if picked and name not in picked.split(","):
        pytest.skip(f"FUZZ_SURFACE={picked}")
    only = int(os.environ["FUZZ_ONLY"]) if os.environ.get("FUZZ_ONLY") else None
    summary = fuzz_family(FAMILIES[name].FAMILY, int(os.environ.get("FUZZ_N", "1000")),
                          seed=int(os.environ.get("FUZZ_SEED", "0")), workdir=tmp_path, only=only)
    print(f"\n{name}: {summary['runs']} runs in {summary['seconds']} s: {summary['refused']} refused, "
          f"{summary['accepted']} accepted faithfully, {len(summary['failures'])} failed {by_owner(summary)}")
    assert summary["failures"] == []
