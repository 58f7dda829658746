"""Backend choice and the trainium backend's command lines, parsing and timing rules.

The trainium end-to-end test needs the Neuron SDK and a Neuron device; elsewhere it is
skipped with that reason."""

from __future__ import annotations

import json
import threading

import pytest

from fitness import backends
from fitness.backends import trainium
from fitness.backends import BackendError, NeuronHost

# The shape of `neuron-profile view --output-format summary-json`: one entry per profiled NEFF.
SUMMARY = {
    "kernel-0.neff": {
        "total_time": 0.0013331,
        "hbm_read_bytes": 117440512,
        "hbm_write_bytes": 117440512,
        "spill_save_bytes": 0,
        "vector_engine_active_time_percent": 0.739,
        "scalar_engine_active_time_percent": 0.315,
        "neff_name": "kernel-0.neff",
        "has_spills": False,
    }
}


def test_profile_view_command_line():
    assert trainium.profile_view_command("/w/k.neff", "/w/k.ntff") == [
        "neuron-profile", "view", "--output-format", "summary-json", "-n", "/w/k.neff", "-s", "/w/k.ntff"]


def test_compile_options_and_core_pinning_follow_the_measurement_protocol():
    assert trainium.COMPILE_OPTIONS == "--disable-dge --logical-nc-config=1"
    assert trainium.core_env(1) == {"NEURON_RT_VISIBLE_CORES": "1", "NEURON_RT_NUM_CORES": "1",
                                    "NEURON_CC_FLAGS": "--auto-cast=none"}


def test_summary_is_parsed_into_latency_and_profile_names():
    latency, profile = trainium.parse_summary(json.loads(json.dumps(SUMMARY)))
    assert latency == pytest.approx(1.3331)
    assert profile["hbm_read_bytes"] == 117440512 and profile["vector_engine_active_time_percent"] == 0.739
    assert "neff_name" not in profile and "has_spills" not in profile   # numbers only
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


def test_auto_choice_says_why():
    assert backends.choose("auto", NeuronHost("", (), 0)) == ("simulator", "auto: no Neuron SDK importable (neuronxcc)")
    name, why = backends.choose("auto", NeuronHost("/opt/neuronxcc", (), 0))
    assert name == "simulator" and "no Neuron device" in why
    name, why = backends.choose("auto", NeuronHost("/opt/neuronxcc", ("/dev/neuron0",), 2))
    assert name == "trainium" and why == "auto: Neuron SDK and 2 NeuronCore(s) on 1 device(s)"
    assert backends.choose("simulator")[0] == "simulator"


def test_explicit_trainium_without_hardware_is_a_clear_error():
    with pytest.raises(BackendError, match="not importable"):
        backends.choose("trainium", NeuronHost("", (), 0))
    with pytest.raises(BackendError, match="no Neuron device"):
        backends.choose("trainium", NeuronHost("/opt/neuronxcc", (), 0))


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


HOST = backends.probe_neuron()


@pytest.mark.skipif(not HOST.usable, reason="needs the Neuron SDK (neuronxcc) and a Neuron device (/dev/neuron*)")
def test_trainium_end_to_end(tmp_path):
    from fitness.service import Evaluator
    from fitness.settings import EvalSettings
    from nkibench.registry import load, make_spec

    spec = make_spec("silu", "small")
    with Evaluator(EvalSettings(backend="trainium", timeout_s=900), run_dir=tmp_path) as ev:
        assert ev.backend_choice[0] == "trainium"
        result = ev.evaluate(spec, load(spec).baseline_source)
    assert result.ok, result.error
    assert result.latency_ms > 0 and result.profile["rel_diffs"] >= 0 and result.speedup == 1.0
    assert list((tmp_path / "artifacts").rglob("*.neff")) and list((tmp_path / "artifacts").rglob("*.ntff"))
