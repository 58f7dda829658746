"""`--target trn1|trn2|trn3` and `--dialect legacy|nki`: which baseline a run starts from, the
problem identity it gives, one-line errors, and the uncalibrated labels."""

from __future__ import annotations

import hashlib
import json

import pytest

from accelopt_evo.cli.main import main
from accelopt_evo.errors import UserError
from accelopt_evo.run import config as config_mod
from accelopt_evo.run.records import figure_label
from accelopt_evo.runner import baseline_dialect, problem_specs
from fitness.cache import cache_key
from nkibench import registry


def _cfg(*sets: str):
    return config_mod.resolve("default", None, list(sets))


def test_targets_are_declared_once():
    from fitness.settings import TARGETS
    from fitness.simulator.perf import TARGETS as MODEL_TARGETS

    assert TARGETS == MODEL_TARGETS == ("trn1", "trn2", "trn3") and config_mod.TARGETS is TARGETS


def test_auto_dialect_is_the_targets():
    assert baseline_dialect("silu", "auto", "trn1") == "legacy"
    assert baseline_dialect("fused_mamba", "auto", "trn1") == "current"   # its only baseline
    if "current" in registry.baseline_dialects("silu"):
        assert baseline_dialect("silu", "auto", "trn2") == "current"
        assert baseline_dialect("silu", "auto", "trn3") == "current"


def test_legacy_on_trn3_is_one_clear_line(capsys):
    assert main(["run", "--target", "trn3", "--dialect", "legacy", "--gens", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "never ran on trn3" in err and "--dialect nki" in err


def test_a_problem_without_a_baseline_in_the_dialect_is_one_clear_line():
    with pytest.raises(UserError, match="problem 'fused_mamba' has no baseline in the legacy dialect"):
        problem_specs(_cfg("run.problems=[\"fused_mamba\"]", "run.dialect=\"legacy\""))
    with pytest.raises(UserError, match="must be one of auto, legacy, nki"):
        _cfg("run.dialect=\"current\"")


def test_the_dialect_is_part_of_the_identity_only_when_not_the_problems_own():
    own = registry.make_spec("silu", "small")
    assert registry.make_spec("silu", "small", dialect="legacy") == own and own.dialect == ""
    key = cache_key("src", own, "simulator", "trn1", (), "v")
    assert own.label() == "silu[M=256,N=512]" or "@" not in own.label()
    if "current" in registry.baseline_dialects("silu"):
        nki = registry.make_spec("silu", "small", dialect="current")
        assert nki.label().endswith("@nki") and nki != own
        assert cache_key("src", nki, "simulator", "trn1", (), "v") != key
        assert registry.load(nki).baseline_path.parent == registry.NKI_BASELINES


def test_default_dialect_keeps_the_configuration_hash_of_earlier_releases():
    # earlier releases ran the declared-knob operators and judged every child (a run folder of
    # theirs resumes so)
    cfg = _cfg('operators.offline="declared_knobs"', 'evaluation.cascade="full"', 'selection.incorrect="excluded"')
    data = cfg.to_dict()
    for dotted in config_mod.LATER_DEFAULTS:   # what a configuration of an earlier release hashed
        *path, key = dotted.split(".")          # e.g. llm.roles.planner.max_tokens
        node = data
        for part in path:
            node = node[part]
        del node[key]
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    assert hashlib.sha256(blob.encode()).hexdigest()[:16] == cfg.hash()
    assert _cfg("run.dialect=\"nki\"").hash() != cfg.hash()
    assert _cfg("evaluation.calibration=\"shipped\"").hash() != cfg.hash()
    assert _cfg("run.mode=\"async\"").hash() != cfg.hash()
    assert _cfg("evaluation.executor=\"ray\"").hash() != cfg.hash()
    assert _cfg().hash() != cfg.hash()          # today's default offline search is not what they ran


def test_figures_of_uncalibrated_targets_say_so():
    assert figure_label("simulator", "trn1") == "simulated estimate for trn1"
    for target in ("trn2", "trn3"):
        assert figure_label("simulator", target) == f"simulated estimate for {target}, uncalibrated"


def test_problems_lists_both_dialects_and_labels_the_target(capsys):
    assert main(["problems", "--target", "trn3"]) == 0
    out = capsys.readouterr().out
    assert "simulated trn3, uncalibrated" in out and "trainium3_arch.rst" in out
    rows = [line.split() for line in out.splitlines()[1:] if line.startswith("silu ")]
    assert {r[1] for r in rows} == {registry.DIALECT_NAMES[d] for d in registry.baseline_dialects("silu")}
