"""Held-out correctness seeds: secret by default (operating-system randomness per run, recorded
in the run folder for the owner only, reused on resume), derived from run.seed on request."""

from __future__ import annotations

import json
import stat

import pytest

from accelopt_evo.errors import UserError
from accelopt_evo.run import config as cfgmod
from accelopt_evo.run.records import read_heldout
from accelopt_evo.runner import heldout_seeds, new_heldout, open_evaluator, resume_run, start_run

pytestmark = pytest.mark.slow


def make_cfg(out, *sets):
    return cfgmod.resolve(sets=[
        f"run.out={json.dumps(str(out))}", "run.gens=1", "run.shape=tiny", "run.report=false", "run.seed=5",
        "population.size=3", "population.offspring=3", "evaluation.seeds=[0, 1]", "evaluation.heldout_seeds=2",
        "evaluation.workers=1", *sets])


def recording(seen: list):
    """The real evaluator factory, noting the held-out seeds each evaluator was given."""
    def make(cfg, folder):
        evaluator = open_evaluator(cfg, folder)
        seen.append(evaluator.settings.heldout_seeds)
        return evaluator
    return make


def quiet(_msg):
    pass


def test_default_seeds_are_secret_per_run_and_appear_in_no_file_or_prompt(tmp_path, llm_server):
    seen: list = []
    folders = []
    for run_id in ("a", "b"):
        cfg = make_cfg(tmp_path, f"llm.base_url={json.dumps(llm_server.url)}", "llm.model=m", "llm.api_key_env=K")
        folders.append(start_run(cfg, run_id, progress=False, log=quiet, evaluator_factory=recording(seen)).folder)
    assert seen[0] != seen[1] and len(seen[0]) == len(seen[1]) == 2
    assert seen[0] != heldout_seeds(5, 2, [0, 1])
    assert llm_server.exchanges
    prompts = "\n".join(ex.request.text for ex in llm_server.exchanges)
    for folder, seeds in zip(folders, seen):
        record = read_heldout(folder.heldout)
        assert record.mode == "secret" and record.seeds == seeds
        assert stat.S_IMODE(folder.heldout.stat().st_mode) == 0o600
        for path in folder.root.rglob("*"):
            if path.is_file() and path != folder.heldout:
                text = path.read_text(errors="replace")
                assert not any(str(s) in text for s in seeds), f"{path.name} shows a held-out seed"
        assert not any(str(s) in prompts for s in seeds)


def test_a_resumed_run_keeps_its_recorded_seeds(tmp_path):
    seen: list = []
    folder = start_run(make_cfg(tmp_path, "operators.kind=tuning"), "r", progress=False, log=quiet,
                       evaluator_factory=recording(seen)).folder
    folder.checkpoint_path(1).unlink()
    resume_run(folder.root, None, progress=False, log=quiet, evaluator_factory=recording(seen))
    assert seen[0] == seen[1] == read_heldout(folder.heldout).seeds
    folder.heldout.unlink()      # a secret record lost: the run cannot go on with other seeds
    folder.checkpoint_path(1).unlink()
    with pytest.raises(UserError, match="heldout.json"):
        resume_run(folder.root, None, progress=False, log=quiet, evaluator_factory=recording(seen))


def test_derived_seeds_follow_run_seed_and_secret_ones_do_not():
    derived = make_cfg(".", "evaluation.heldout=derived")
    assert new_heldout(derived).seeds == new_heldout(derived).seeds == heldout_seeds(5, 2, [0, 1])
    secret = make_cfg(".")
    assert secret.evaluation.heldout == "secret"
    first, second = new_heldout(secret).seeds, new_heldout(secret).seeds
    assert first != second and not set(first) & {0, 1}
    with pytest.raises(UserError, match="evaluation.heldout"):
        make_cfg(".", "evaluation.heldout=guess")
