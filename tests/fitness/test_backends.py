"""Backend choice, host detection and the trainium backend's command lines, parsing, timing
rules and both SDK paths, the last against a fake toolchain (tests/fitness/fake_neuron: stand-in
SDK packages running kernels on the emulator, stand-in profiler executables).

The trainium end-to-end test needs the Neuron SDK and a Neuron device; elsewhere it is
skipped with that reason."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from fitness import backends
from fitness.backends import BackendError, NeuronHost, host as host_mod, trainium
from fitness.cache import cache_key
from fitness.sandbox.process import Limits
from nkibench.registry import load, make_spec

# `neuron-profile view --output-format summary-json` (and neuron-explorer's): one entry per
# profiled NEFF; metric names of the profile schema reference (tools/neuron-explorer/
# profile-schema-reference.rst), times in seconds, `*_percent` as fractions. Values: the trn1 silu
# measurement, rounded (../shared/nkibench/trn1_measurements.json).
SUMMARY = {
    "kernel-0": {
        "total_time": 0.0013332,
        "hbm_read_bytes": 117440512,
        "hbm_write_bytes": 117440512,
        "spill_save_bytes": 0,
        "vector_engine_active_time": 0.000985,
        "vector_engine_active_time_percent": 0.739,
        "scalar_engine_active_time_percent": 0.315,
    }
}


def test_profile_view_command_line():
    assert trainium.profile_view_command("/w/k.neff", "/w/k.ntff") == [
        "neuron-profile", "view", "--output-format", "summary-json", "-n", "/w/k.neff", "-s", "/w/k.ntff"]


def test_compile_options_and_core_pinning_follow_the_measurement_protocol():
    assert trainium.COMPILE_OPTIONS == "--disable-dge --logical-nc-config=1"
    assert trainium.core_env(1) == {"NEURON_RT_VISIBLE_CORES": "1", "NEURON_RT_NUM_CORES": "1",
                                    "NEURON_CC_FLAGS": "--auto-cast=none"}
    # trn2/trn3 default to 2 physical cores per logical core: the runtime must match the compile option
    assert trainium.core_env(5, "trn2")["NEURON_LOGICAL_NC_CONFIG"] == "1"
    assert trainium.core_env(5, "trn3")["NEURON_RT_VISIBLE_CORES"] == "5"


def test_summary_is_parsed_into_latency_and_profile_names():
    latency, profile = trainium.parse_summary(json.loads(json.dumps(SUMMARY)))
    assert latency == pytest.approx(1.3332)
    assert profile["hbm_read_bytes"] == 117440512 and profile["vector_engine_active_time_percent"] == 0.739
    assert trainium.parse_summary({"k": {"total_time": 1e-3, "neff_name": "k.neff", "flag": True}})[1] == {
        "total_time": 1e-3}   # numbers only
    with pytest.raises(ValueError):
        trainium.parse_summary({})
    with pytest.raises(ValueError):
        trainium.parse_summary({"x": {"hbm_read_bytes": 1}})


def _fake_kernel(latencies):
    calls = {"warmup": 0, "timed": 0}
    it = iter(latencies)

    def run_once(timed, index):
        if not timed:
            calls["warmup"] += 1
            return None
        calls["timed"] += 1
        return next(it), {"hbm_read_bytes": 1.0}

    return run_once, calls


def test_two_warmups_then_ten_timed_runs_when_the_spread_is_small():
    run_once, calls = _fake_kernel([1.000, 1.005, 1.002] + [1.001] * 7)
    best, spreads = trainium.timed_series(run_once, sleep=lambda s: None)
    assert calls == {"warmup": 2, "timed": 10}
    assert best.mean_ms == pytest.approx(sum([1.000, 1.005, 1.002] + [1.001] * 7) / 10)
    assert len(spreads) == 1 and spreads[0] <= 0.01


def test_noisy_series_are_retried_a_bounded_number_of_times_keeping_the_tightest():
    noisy = [1.0, 1.2] + [1.1] * 8           # 20 % spread
    tighter = [1.0, 1.05] + [1.02] * 8       # 5 %
    worst = [1.0, 1.3] + [1.1] * 8           # 30 %
    run_once, calls = _fake_kernel(noisy + tighter + worst + [1.0] * 10)
    best, spreads = trainium.timed_series(run_once, sleep=lambda s: None)
    assert calls == {"warmup": 6, "timed": 30}            # three series, never a fourth
    assert spreads == pytest.approx([0.2, 0.05, 0.3])
    assert best.latencies_ms == tighter


def test_core_leases_give_each_evaluation_its_own_core():
    leases = trainium.CoreLeases(2)
    held: list[int] = []
    with leases.lease() as a, leases.lease() as b:
        held += [a, b]
        got = []
        t = threading.Thread(target=lambda: got.append(leases.lease().__enter__()))
        t.start()
        t.join(0.2)
        assert t.is_alive()          # a third evaluation waits for a free core
    t.join(2)
    assert sorted(held) == [0, 1] and got and got[0] in (0, 1)


LEGACY_TRN1 = NeuronHost("/opt/neuronxcc", ("/dev/neuron0",), 2, compiler_version="2.21.18",
                         instance_type="trn1.2xlarge", profiler="/opt/bin/neuron-profile")
# Neuron 2.30+: neuronx-cc still installed, but NKI 0.4 makes legacy kernels a compile error
NEW_SDK = dict(sdk="/opt/neuronxcc", compiler_version="2.23.1", nki="/opt/nki", nki_version="0.4.0")


def test_auto_choice_says_why():
    assert backends.choose("auto", NeuronHost()) == ("simulator", "auto: no Neuron SDK importable (neuronxcc or nki)")
    name, why = backends.choose("auto", NeuronHost("/opt/neuronxcc", (), 0))
    assert name == "simulator" and "no Neuron device" in why
    name, why = backends.choose("auto", LEGACY_TRN1)
    assert name == "trainium" and why == "auto: neuronx-cc 2.21.18 and 2 NeuronCore(s) on 1 trn1 device(s)"
    assert backends.choose("simulator")[0] == "simulator"


def test_auto_falls_back_to_the_simulator_when_no_kernel_of_the_run_could_run():
    # a trn1 with Neuron 2.30+: legacy kernels no longer compile, current ones never ran on trn1
    trn1_new = NeuronHost(devices=("/dev/neuron0",), cores=2, instance_type="trn1.32xlarge", **NEW_SDK)
    assert trn1_new.dialects == ()
    name, why = backends.choose("auto", trn1_new, "trn1")
    assert name == "simulator" and why == ("auto: the installed Neuron SDK (neuronx-cc 2.23.1; nki 0.4.0) "
                                           "compiles no NKI dialect trn1 runs")
    # a trn2 host does not measure a run that asked for trn1 figures
    trn2 = NeuronHost(devices=("/dev/neuron0",), cores=8, instance_type="trn2.48xlarge", **NEW_SDK)
    name, why = backends.choose("auto", trn2, "trn1")
    assert name == "simulator" and "this host is trn2 (trn2.48xlarge), but evaluation.target is trn1" in why
    assert backends.choose("auto", trn2, "trn2")[0] == "trainium"


def test_explicit_trainium_without_hardware_is_a_clear_error():
    with pytest.raises(BackendError, match="no Neuron SDK importable"):
        backends.choose("trainium", NeuronHost("", (), 0))
    with pytest.raises(BackendError, match="no Neuron device"):
        backends.choose("trainium", NeuronHost("/opt/neuronxcc", (), 0))
    with pytest.raises(BackendError, match="this host is trn1"):
        backends.choose("trainium", LEGACY_TRN1, "trn2")


def test_version_gate_refuses_impossible_pairs_with_one_line():
    trn2_new = NeuronHost(devices=("/dev/neuron0",), cores=8, instance_type="trn2.48xlarge", **NEW_SDK)
    assert trn2_new.dialects == ("current",)
    why = backends.dialect_refusal("trainium", "legacy", trn2_new)
    assert why == ("legacy-dialect kernels (import neuronxcc.nki) are a compile error from Neuron 2.30 (NKI 0.4); "
                   "this host has neuronx-cc 2.23.1; nki 0.4.0") and "\n" not in why
    trn2_29 = NeuronHost(devices=("/dev/neuron0",), cores=8, instance_type="trn2.48xlarge",
                         **{**NEW_SDK, "nki_version": "0.3.1"})
    assert trn2_29.dialects == ("legacy", "current")        # Neuron 2.29 takes both
    trn1_29 = NeuronHost(devices=("/dev/neuron0",), cores=2, instance_type="trn1.2xlarge",
                         **{**NEW_SDK, "nki_version": "0.3.1"})
    assert backends.dialect_refusal("trainium", "current", trn1_29) == (
        "current-dialect kernels (import nki, NKI >= 0.3) do not run on trn1")
    assert backends.dialect_refusal("trainium", "legacy", trn1_29) == ""
    assert backends.dialect_refusal("simulator", "current", trn1_29) == ""


def test_the_host_is_detected_sdk_versions_instance_and_target(tmp_path, fake_toolchain):
    chain = fake_toolchain(compiler="2.21.18", nki="0.6.0")
    (tmp_path / "dmi").write_text("trn2.48xlarge\n")
    (tmp_path / "neuron0").write_text("")
    found = host_mod.probe(str(tmp_path / "neuron[0-9]*"), str(tmp_path / "dmi"))
    assert found.sdk.startswith(str(chain.site)) and found.nki.startswith(str(chain.site))
    assert (found.compiler_version, found.nki_version, found.target) == ("2.21.18", "0.6.0", "trn2")
    assert found.sdk_version == "neuronx-cc 2.21.18; nki 0.6.0"
    assert found.dialects == ("current",) and found.profiler == str(chain.bin / "neuron-explorer")
    assert found.cores == 2      # no neuron-ls: two per device
    assert host_mod.target_of_instance("inf2.xlarge") == "trn1" and host_mod.target_of_instance("m5.large") == ""


def test_cache_keys_keep_hardware_results_of_different_sdks_and_chips_apart():
    spec = make_spec("silu", "small")
    src = "def kernel(a):\n    return a\n"
    key = [src, spec, "trainium", "trn1", [[0], [], 0.0], "1-abc"]
    a = cache_key(*key, context=["neuronx-cc 2.21.18", "trn1.2xlarge"])
    assert a != cache_key(*key, context=["neuronx-cc 2.22.0", "trn1.2xlarge"])
    assert a != cache_key(*key, context=["neuronx-cc 2.21.18", "trn1.32xlarge"])
    # simulator keys have no context field: a fixed value (computed when the key took the source's
    # judged form, its syntax tree with lines, in place of its normalized text)
    assert cache_key(src, spec, "simulator", "trn1", [[0], [], 0.0], "1-abc") == (
        "7c2fe892579e774fce95a1c036dab372d32350ec59fa7f785052e526bf7f5087")


def test_the_toolchain_keeps_its_address_space_and_gets_more_files():
    probe = ("import resource, sys; from fitness.sandbox.process import apply_limits; apply_limits({limits!r}); "
             "print(resource.getrlimit(resource.RLIMIT_AS)[0], resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    seen = []
    for toolchain in (False, True):
        limits = Limits(10, 512, toolchain=toolchain).to_child()
        out = subprocess.run([sys.executable, "-c", probe.format(limits=limits)], capture_output=True, text=True,
                             check=True).stdout.split()
        seen.append([int(x) for x in out])
    assert seen[0] == [512 << 20, 256]
    assert seen[1][0] != 512 << 20 and seen[1][1] == 4096


def test_the_emulator_stand_in_is_not_mistaken_for_the_sdk(tmp_path, monkeypatch):
    from fitness.simulator import install_neuronxcc

    install_neuronxcc()
    import neuronxcc  # noqa: F401  (resolves to the emulator in this process)

    assert backends.find_sdk() == ""
    fake = tmp_path / "site" / "neuronxcc"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert backends.find_sdk() == str(fake)      # a real package on sys.path is found all the same


def test_core_count_from_neuron_ls():
    listing = [{"neuron_device": 0, "nc_count": 2}, {"neuron_device": 1, "nc_count": 2}]
    assert backends.cores_from_neuron_ls(listing) == 4
    # trn2 lists logical cores of its default configuration (2 physical each); kernels run at 1
    assert backends.cores_from_neuron_ls([{"neuron_device": 0, "nc_count": 4}], host_mod.logical_nc_config("trn2", {})) == 8
    assert host_mod.logical_nc_config("trn2", {"NEURON_LOGICAL_NC_CONFIG": "1"}) == 1


# -- both SDK paths against the fake toolchain --------------------------------------------------


def _runner(tmp_path, monkeypatch, target="trn1", core=0):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for k, v in trainium.core_env(core, target).items():
        monkeypatch.setenv(k, v)
    return trainium.TrainiumRunner(target, {}), work


def _silu(dialect=""):
    spec = make_spec("silu", "small", dialect=dialect)
    problem = load(spec)
    return problem, problem.baseline_source, problem.to_kernel_inputs(problem.make_inputs(0))


def test_legacy_path_fresh_artifact_names_per_timed_run(tmp_path, monkeypatch, fake_toolchain):
    chain = fake_toolchain(compiler="2.21.18")
    problem, source, args = _silu()
    runner, work = _runner(tmp_path, monkeypatch)
    outputs, _ = runner.run(source, args)
    assert np.allclose(np.asarray(outputs, dtype=np.float64),
                       problem.reference(*problem.make_inputs(0)), rtol=1e-3, atol=1e-3)
    chain.set_latencies([1.0, 1.001, 1.002] * 4)
    latency, profile = runner.measure(source, args, None)
    views = [c for c in chain.calls() if c["argv"][0] == "view"]
    assert len(views) == 10 and all(c["tool"] == "neuron-profile" for c in views)
    neffs = [c["argv"][c["argv"].index("-n") + 1] for c in views]
    ntffs = [c["argv"][c["argv"].index("-s") + 1] for c in views]
    assert len(set(neffs)) == 10 and len(set(ntffs)) == 10          # a fresh NEFF and NTFF per timed run
    assert [n.rsplit("/", 1)[1] for n in neffs[:2]] == ["kernel-001.neff", "kernel-002.neff"]
    assert latency == pytest.approx(np.mean([1.0, 1.001, 1.002] * 3 + [1.0]))
    assert profile["hbm_read_bytes"] == 1048576 and profile["series_spreads"] == [pytest.approx(0.002)]
    assert runner.artifacts == ["kernel-010.neff", "kernel-010.ntff"]
    assert sorted(p.name for p in work.glob("kernel-*")) == ["kernel-010.neff", "kernel-010.ntff"]
    assert not list(work.glob("run-*"))       # earlier runs' files and folders are gone


def test_a_missing_artifact_is_named_before_profiling(tmp_path, monkeypatch, fake_toolchain):
    chain = fake_toolchain(compiler="2.21.18")
    _, source, args = _silu()
    runner, _ = _runner(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_NEURON_MISSING", "ntff")
    with pytest.raises(trainium.ArtifactError, match="the trace profile.ntff was not written"):
        runner.measure(source, args, None)
    assert not [c for c in chain.calls() if c["argv"][0] == "view"]   # never profiled a missing file


def test_noisy_series_are_retried_on_the_device(tmp_path, monkeypatch, fake_toolchain):
    chain = fake_toolchain(compiler="2.21.18")
    _, source, args = _silu()
    runner, _ = _runner(tmp_path, monkeypatch)
    monkeypatch.setattr(trainium.time, "sleep", lambda s: None)
    chain.set_latencies([1.0, 1.2] + [1.1] * 8 + [1.0] * 10)   # 20 % spread, then a steady series
    latency, profile = runner.measure(source, args, None)
    assert profile["series_spreads"] == [pytest.approx(0.2), 0.0] and latency == pytest.approx(1.0)
    assert len([c for c in chain.calls() if c["argv"][0] == "view"]) == 20


def test_current_path_captures_a_warm_execution_pinned_to_its_core(tmp_path, monkeypatch, fake_toolchain):
    chain = fake_toolchain(compiler="2.21.18", nki="0.6.0")
    problem, source, args = _silu("current")
    assert "import nki" in source
    runner, work = _runner(tmp_path, monkeypatch, target="trn2", core=3)
    outputs, _ = runner.run(source, args)
    assert np.allclose(np.asarray(outputs, dtype=np.float64),
                       problem.reference(*problem.make_inputs(0)), rtol=1e-3, atol=1e-3)
    latency, profile = runner.measure(source, args, None)
    calls = chain.calls()
    captures = [c for c in calls if c["argv"][0] == "capture"]
    assert len(captures) == 10 and all("--profile-nth-exec=2" in c["argv"] for c in captures)
    assert len({c["argv"][c["argv"].index("-s") + 1] for c in captures}) == 10
    assert all(c["tool"] == "neuron-explorer" for c in calls)
    assert all(c["env"] == {"NEURON_RT_VISIBLE_CORES": "3", "NEURON_RT_NUM_CORES": "1",
                            "NEURON_LOGICAL_NC_CONFIG": "1"} for c in calls)
    assert latency == pytest.approx(1.0) and profile["device_core"] == "3"
    assert runner.artifacts == ["kernel.neff", "kernel-010_exec_2.ntff"]


def test_a_failing_profiler_is_one_line(tmp_path, monkeypatch, fake_toolchain):
    chain = fake_toolchain(nki="0.6.0")
    _, source, args = _silu("current")
    runner, work = _runner(tmp_path, monkeypatch, target="trn2")
    runner.run(source, args)
    (chain.bin / "neuron-explorer").write_text("#!/bin/sh\necho 'ERROR: device busy' >&2\nexit 3\n")
    with pytest.raises(trainium.ProfilerError, match=r"^neuron-explorer capture failed \(exit 3\): ERROR: device busy$"):
        runner.measure(source, args, None)


def test_current_path_without_a_neff_from_the_runtime_says_so(tmp_path, monkeypatch, fake_toolchain):
    fake_toolchain(nki="0.6.0")
    _, source, args = _silu("current")
    runner, _ = _runner(tmp_path, monkeypatch, target="trn2")
    monkeypatch.setenv("FAKE_NEURON_MISSING", "neff")
    runner.run(source, args)
    with pytest.raises(trainium.ArtifactError, match="wrote no NEFF"):
        runner.measure(source, args, None)


HOST = backends.probe_neuron()


@pytest.mark.skipif(not HOST.usable, reason="needs the Neuron SDK (neuronxcc or nki), a Neuron device (/dev/neuron*) and a known instance type")
def test_trainium_end_to_end(tmp_path):
    from fitness.service import Evaluator
    from fitness.settings import EvalSettings
    from nkibench.registry import load, make_spec

    spec = make_spec("silu", "small")
    with Evaluator(EvalSettings(backend="trainium", target=HOST.target, timeout_s=900), run_dir=tmp_path) as ev:
        assert ev.backend_choice[0] == "trainium"
        result = ev.evaluate(spec, load(spec).baseline_source)
    assert result.ok, result.error
    assert result.latency_ms > 0 and result.profile["rel_diffs"] >= 0 and result.speedup == 1.0
    assert list((tmp_path / "artifacts").rglob("*.neff")) and list((tmp_path / "artifacts").rglob("*.ntff"))


def test_each_concurrent_evaluation_runs_pinned_to_its_own_core(tmp_path, monkeypatch):
    """The evaluator gives every kernel process one NeuronCore of its own, at logical-core
    configuration 1 on trn2, with the toolchain's limits (the sandbox itself is replaced)."""
    from fitness import service as service_mod
    from fitness.sandbox.process import Outcome
    from fitness.service import Evaluator
    from fitness.settings import EvalSettings

    trn2 = NeuronHost("/opt/neuronxcc", ("/dev/neuron0",), 2, nki="/opt/nki", compiler_version="2.23.1",
                      nki_version="0.6.0", instance_type="trn2.48xlarge", profiler="/opt/bin/neuron-explorer")
    monkeypatch.setattr(backends, "probe_neuron", lambda: trn2)
    both_running = threading.Barrier(2, timeout=20)
    seen = []

    def sandboxed(module, request, limits, workdir, on_message=None, *, extra_env=None, **_):
        seen.append((dict(extra_env or {}), limits.toolchain, request["target"], request["options"]))
        both_running.wait()      # two evaluations hold their cores at the same time
        return Outcome(returncode=1, stderr="stand-in kernel process")

    monkeypatch.setattr(service_mod.process, "run", sandboxed)
    spec = make_spec("silu", "small", dialect="current")
    source = load(spec).baseline_source
    with Evaluator(EvalSettings(backend="auto", target="trn2"), run_dir=tmp_path) as ev:
        assert ev.backend_choice[0] == "trainium"
        results = ev.evaluate_many(spec, [source, source + "\n# a second kernel\nX = 1\n"])
    assert [r.status for r in results] == ["crashed", "crashed"]
    assert {r.instance_type for r in results} == {"trn2.48xlarge"} and results[0].target == "trn2"
    envs = [env for env, *_ in seen]
    assert sorted(env["NEURON_RT_VISIBLE_CORES"] for env in envs[:2]) == ["0", "1"]
    assert all(env["NEURON_LOGICAL_NC_CONFIG"] == "1" and env["NEURON_RT_NUM_CORES"] == "1" for env in envs)
    assert all(toolchain and target == "trn2" and options == {"profiler": "/opt/bin/neuron-explorer"}
               for _, toolchain, target, options in seen)
