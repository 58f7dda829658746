from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Mapping

import pytest

from accelopt_evo.errors import UserError
from accelopt_evo.run import config as cfgmod
from operators.tuning import Mutation


def test_defaults_are_valid_and_default_preset_changes_nothing():
    assert cfgmod.resolve() == cfgmod.Config()
    assert set(cfgmod.preset_names()) >= {"default", "paper"}


def test_file_then_set_override_order(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[population]\nsize = 12\noffspring = 6\n[selection]\nmethod = 'best'\n")
    cfg = cfgmod.resolve(config_file=f, sets=["population.size=20"])
    assert cfg.population.size == 20 and cfg.population.offspring == 6 and cfg.selection.method == "best"


@pytest.mark.parametrize("assignment, path, expected", [
    ("selection.tournament_size=5", ("selection", "tournament_size"), 5),
    ("variation.crossover_prob=0.5", ("variation", "crossover_prob"), 0.5),
    ("variation.crossover_prob=1", ("variation", "crossover_prob"), 1.0),   # int widens to float
    ("run.report=false", ("run", "report"), False),
    ("evaluation.seeds=[1, 2, 3]", ("evaluation", "seeds"), [1, 2, 3]),
    ("llm.model=gpt-oss-120b", ("llm", "model"), "gpt-oss-120b"),          # bare word -> str
    ("llm.base_url=http://127.0.0.1:8000/v1", ("llm", "base_url"), "http://127.0.0.1:8000/v1"),
    ('llm.model="quoted"', ("llm", "model"), "quoted"),
])
def test_set_values_keep_their_types(assignment, path, expected):
    cfg = cfgmod.resolve(sets=[assignment])
    value = getattr(getattr(cfg, path[0]), path[1])
    assert value == expected and type(value) is type(expected)


def test_set_nested_role_and_shapes():
    cfg = cfgmod.resolve(sets=["llm.roles.planner.model=small", "shapes.silu.M=256"])
    assert cfg.llm.roles.planner.model == "small"
    assert cfg.llm.roles.implementer.model is None
    assert cfg.shapes == {"silu": {"M": 256}}


@pytest.mark.parametrize("assignment, message", [
    ("population.size=abc", "population.size"),
    ("population.size=1.5", "population.size"),
    ("population.size=true", "population.size"),
    ("run.problems=silu", "run.problems"),
    ("population.bogus=1", "population.bogus"),
    ("nosuch.key=1", "nosuch"),
    ("selection.method=lottery", "selection.method"),
    ("population.elitism=99", "population.elitism"),
    ("evaluation.target=trn9", "evaluation.target"),
    ("shapes.silu.M=big", "shapes.silu.M"),
    ("novalue", "section.key=value"),
])
def test_bad_values_name_the_key(assignment, message):
    with pytest.raises(UserError) as err:
        cfgmod.resolve(sets=[assignment])
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_files(tmp_path):
    with pytest.raises(UserError, match="cannot read config file"):
        cfgmod.resolve(config_file=tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\nseed = 1\n")
    with pytest.raises(UserError, match="invalid TOML"):
        cfgmod.resolve(config_file=bad)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[run]\nsede = 1\n")
    with pytest.raises(UserError, match="run.sede"):
        cfgmod.resolve(config_file=unknown)


def test_toml_round_trip_keeps_values_and_hash():
    cfg = cfgmod.resolve(preset="paper", sets=["llm.roles.planner.model=p", "shapes.silu.N=512",
                                              "llm.extra={reasoning_effort = 'high'}"])
    again = cfgmod.from_dict(cfgmod.tomllib.loads(cfgmod.to_toml(cfg)))
    assert again == cfg and again.hash() == cfg.hash()
    assert cfg.hash() != cfgmod.Config().hash()


# Settings of the evaluation service and the LLM client are declared once, in their own settings
# types; the configuration's sections are generated from them.


@dataclass(frozen=True)
class NewSettings:
    """A settings type as a later release might grow one."""

    retries: int = 3
    ratio: float = 0.5
    seeds: tuple[int, ...] = (4, 5)
    headers: Mapping[str, Any] = field(default_factory=dict)


def defaults(cls) -> dict:
    out = {}
    for f in fields(cls):
        value = f.default if f.default is not MISSING else f.default_factory()
        out[f.name] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) else value
    return out


def test_a_settings_field_is_a_config_key_with_its_type_default_and_strict_checks():
    section = cfgmod._section("NewSection", NewSettings, "doc")
    assert asdict(section()) == {"retries": 3, "ratio": 0.5, "seeds": [4, 5], "headers": {}}
    built = cfgmod._build(section, {"retries": 7, "ratio": 1, "seeds": [1], "headers": {"a": 1}}, "new")
    assert (built.retries, built.ratio, built.seeds, built.headers) == (7, 1.0, [1], {"a": 1})
    with pytest.raises(UserError, match="config key 'new.retries' must be int"):
        cfgmod._build(section, {"retries": "many"}, "new")
    with pytest.raises(UserError, match="unknown config key 'new.retry'"):
        cfgmod._build(section, {"retry": 1}, "new")


def test_evaluation_llm_and_budget_sections_are_the_settings_types_fields():
    from fitness.settings import EvalSettings
    from operators.llm.settings import BudgetSettings, LLMSettings, RoleSettings

    cfg = cfgmod.Config()
    evaluation = asdict(cfg.evaluation)
    assert {evaluation.pop("heldout_seeds"), evaluation.pop("heldout")} == {2, "secret"}
    assert evaluation.pop("cascade") == "latency_first"   # the engine's: which children it has judged
    # kernel_file is the file `eval` read its kernel from, not a setting
    assert evaluation == {k: v for k, v in defaults(EvalSettings).items() if k not in ("heldout_seeds", "kernel_file")}
    llm = asdict(cfg.llm)
    assert set(llm.pop("roles")) == set(cfgmod.LLM_ROLES)
    assert llm == {k: v for k, v in defaults(LLMSettings).items() if k != "roles"}
    assert set(asdict(cfg.llm.roles.planner)) == {f.name for f in fields(RoleSettings)} - {"role"}
    assert asdict(cfg.budget) == defaults(BudgetSettings)
    cfg = cfgmod.resolve(sets=["evaluation.cache_dir=c", "evaluation.workers=3"])
    settings = cfgmod.evaluation_settings(cfg, (77,))
    assert (settings.cache_dir, settings.workers, settings.heldout_seeds) == ("c", 3, (77,))


def test_reading_the_configuration_does_not_load_the_llm_client():
    import subprocess
    import sys
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[3])
    code = (f"import sys; sys.path.insert(0, {repo!r}); import accelopt_evo.run.config as c; c.resolve(); "
            "print(sorted(m for m in ('openai', 'httpx', 'operators.llm.client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_offline_operator_settings_and_the_mode_an_old_run_folder_resumes_with():
    cfg = cfgmod.resolve(sets=["operators.rewrite_weight=0.5", 'operators.rewrites=["fuse_activation"]'])
    assert cfg.operators.mutation() == Mutation("search", 1.0, 0.5, ("fuse_activation",))
    # a folder whose config.toml predates operators.offline ran the declared-knob operators
    assert cfgmod.from_saved({}).operators.offline == "declared_knobs"
    assert cfgmod.from_saved({"operators": {"offline": "search"}}).operators.offline == "search"
    for bad, key in (('operators.rewrites=["unroll"]', "operators.rewrites"), ('operators.offline="x"', "operators.offline"),
                     ("operators.knob_weight=-1", "operators.knob_weight")):
        with pytest.raises(UserError, match=rf"config key '{key}'"):
            cfgmod.resolve(sets=[bad])


def test_cascade_settings_and_what_run_folders_of_earlier_releases_resume_with():
    cfg = cfgmod.resolve()
    assert (cfg.evaluation.cascade, cfg.selection.incorrect) == ("latency_first", "entrants")
    old = cfgmod.from_saved({})   # a config.toml written before the settings existed
    assert (old.evaluation.cascade, old.selection.incorrect) == ("full", "excluded")
    assert old.hash() == cfgmod.from_saved({}).hash() and cfg.hash() != old.hash()
    for bad, key in (('evaluation.cascade="lazy"', "evaluation.cascade"), ('selection.incorrect="x"', "selection.incorrect")):
        with pytest.raises(UserError, match=rf"config key '{key}' must be one of"):
            cfgmod.resolve(sets=[bad])


def test_kernel_paths_leave_earlier_hashes_alone_and_must_be_folders(tmp_path):
    cfg = cfgmod.resolve()
    assert cfg.evaluation.kernel_paths == []
    # the default is left out of the hash, as if the setting did not exist (earlier run folders)
    assert cfg.hash() == cfg.hash(omit=["evaluation.kernel_paths"])
    lib = tmp_path / "lib"
    lib.mkdir()
    with_paths = cfgmod.resolve(sets=[f'evaluation.kernel_paths=["{lib}"]'])
    assert with_paths.hash() != cfg.hash()
    assert cfgmod.evaluation_settings(with_paths).kernel_paths == (str(lib.resolve()),)
    with pytest.raises(UserError, match=r"config key 'evaluation.kernel_paths' '.*nope' is not a folder"):
        cfgmod.resolve(sets=[f'evaluation.kernel_paths=["{tmp_path / "nope"}"]'])
