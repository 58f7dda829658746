"""`measure` against the fake toolchain: the trainium runner measures each kernel (fake SDK
and profiler), and the file it writes is the variants format that `calibrate` and
`model-check` read back (profile counters included). Without a Trainium host the command
ends with one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from accelopt_evo.cli import main as cli
from fitness import backends
from fitness.backends import host as host_mod
from fitness.backends.trainium import TrainiumRunner
from fitness.result import OK, EvalResult
from fitness.simulator.perf.check import load_cases
from nkibench.registry import load, make_spec

NKIBENCH = Path(__file__).resolve().parents[2].parent / "shared" / "nkibench"


class InProcessTrainium:
    """The evaluation service reduced to the trainium runner, in this process (the sandboxed
    kernel process cannot see a fake SDK on a temporary sys.path)."""

    def __init__(self, host, workdir: Path) -> None:
        self.host, self.workdir = host, workdir

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def evaluate(self, spec, source):
        problem = load(spec)
        args = problem.to_kernel_inputs(problem.make_inputs(0))
        folder = self.workdir / f"k{len(list(self.workdir.iterdir()))}"
        folder.mkdir()
        here = Path.cwd()
        os.chdir(folder)
        try:
            runner = TrainiumRunner(self.host.target, {"profiler": self.host.profiler})
            runner.run(source, args)
            latency, profile = runner.measure(source, args, None)
        finally:
            os.chdir(here)
        return EvalResult(OK, latency_ms=latency, profile=profile, backend="trainium", target=self.host.target,
                          sdk_version=self.host.sdk_version, instance_type=self.host.instance_type)


@pytest.fixture
def trn1_host(tmp_path, fake_toolchain, monkeypatch):
    chain = fake_toolchain(compiler="2.21.18")
    (tmp_path / "dmi").write_text("trn1.2xlarge\n")
    (tmp_path / "neuron0").write_text("")
    host = host_mod.probe(str(tmp_path / "neuron[0-9]*"), str(tmp_path / "dmi"))
    monkeypatch.setattr(backends, "probe_neuron", lambda: host)
    work = tmp_path / "work"
    work.mkdir()
    factory = lambda cfg, folder: InProcessTrainium(host, work)  # noqa: E731
    monkeypatch.setitem(cli.COMMANDS, "measure", lambda args: cli.cmd_measure(args, factory))
    return chain, host


def test_measure_writes_points_calibrate_reads(trn1_host, tmp_path, capsys, monkeypatch):
    chain, host = trn1_host
    kernel = tmp_path / "kernels" / "silu_v1.py"
    kernel.parent.mkdir()
    spec_source = Path(__file__).resolve().parents[2] / "nkibench" / "baselines" / "silu.py"
    kernel.write_text(spec_source.read_text())
    chain.set_latencies([0.25])
    out = tmp_path / "out" / "measurements.json"
    assert cli.main(["measure", str(kernel), "--problem", "silu", "--shape", "small", "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"measurements: {out}\n"
    data = json.loads(out.read_text())
    assert data["target"] == "trn1" and data["source"].startswith("trn1.2xlarge (trn1), neuronx-cc 2.21.18")
    (point,) = data["points"]
    assert point["kernel"] == "../kernels/silu_v1.py" and point["problem"] == "silu"
    assert point["latency_ms"] == pytest.approx(0.25)
    assert point["profile"]["hbm_read_bytes"] == 1048576 and point["profile"]["rel_diffs"] == 0.0
    assert point["shape"] == dict(make_spec("silu", "small").params)
    if not (NKIBENCH / "summary.json").is_file():
        pytest.skip("the NKIBench folder is absent from ../shared: the read-back needs its reference modules")
    (case,) = load_cases(out, NKIBENCH)
    assert case.kernel == out.parent / "../kernels/silu_v1.py" and case.measured["latency"] == pytest.approx(0.25)
    assert case.measured["vector_engine_active_time_percent"] == 0.42     # counters reach the fit's step 2


def test_measure_without_a_trainium_host_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(backends, "probe_neuron", lambda: backends.NeuronHost())
    assert cli.main(["measure", "k.py", "--problem", "silu"]) == 2
    assert capsys.readouterr().err == ("error: measure runs on a Trainium host only: evaluation.backend = "
                                       "trainium, but no Neuron SDK importable (neuronxcc or nki)\n")
