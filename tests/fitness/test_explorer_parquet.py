"""Neuron Explorer's Parquet profile (fitness/backends/explorer_parquet.py) against tables in the
layout of the SDK's schema page (the fake device, tests/fitness/fake_neuron/device.py, writes
them from explorer_schema.json, generated from that page), and the trainium backend reading
them: hot lines, engine activity, DMA packets, and one-line failures that fail only the child
they belong to."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from fake_neuron import device  # noqa: E402
from fitness.backends import explorer_parquet as xp, trainium  # noqa: E402
from fitness.measures import hotlines  # noqa: E402
from fitness.sandbox import worker  # noqa: E402
from nkibench.registry import load, make_spec  # noqa: E402
from operators.base import Parent  # noqa: E402
from operators.llm.prompts import format_profile  # noqa: E402

SCHEMA = device.schema()
# A compiled kernel as the fake NEFF holds it: [engine, kind, start ns, end ns, line, bytes]
NEFF = {"latency_ns": 10_000.0, "debug_info": True, "ops": [
    ["dma", "DMA_LOAD", 0, 4_000, 3, 65536],
    ["dma", "DMA_LOAD", 1_000, 5_000, 3, 65536],     # overlaps the first: the line's union is 5 us
    ["scalar", "act", 4_000, 7_000, 5, 0],
    ["vector", "tt", 5_000, 6_000, 6, 0],
    ["vector", "tt", 7_000, 9_000, 6, 0],
    ["dma", "DMA_STORE", 9_000, 10_000, 8, 65536],
]}


def _tables(tmp_path, neff=NEFF, measured_ns=10_000.0, **config) -> Path:
    folder = tmp_path / "tables"
    device.write_tables(folder, neff, {"measured_ns": measured_ns, "factor": measured_ns / neff["latency_ns"]},
                        device.DeviceConfig(**config))
    return folder


def test_every_table_and_field_the_reader_names_is_on_the_schema_page():
    assert SCHEMA["schema_version"] == xp.SCHEMA_PAGE == "7.4.0"
    for table in xp.TABLES:
        documented = {f[0] for f in SCHEMA["tables"][table.name]}
        assert set(table.fields) <= documented, (table.name, set(table.fields) - documented)
    assert set(xp.ACTIVITY.values()) <= {f[0] for f in SCHEMA["tables"]["Summary"]}


def test_the_fake_writes_only_documented_fields_with_their_types(tmp_path):
    import pyarrow.parquet as pq

    folder = _tables(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["ActiveTime.parquet", "DmaPacket.parquet",
                                                        "Instruction.parquet", "Metadata.parquet", "Summary.parquet"]
    schema = pq.read_schema(folder / "Instruction.parquet")
    assert schema.names == [f[0] for f in SCHEMA["tables"]["Instruction"]]
    assert str(schema.field("start_ts").type) == "int64" and str(schema.field("engine").type) == "string"
    with pytest.raises(KeyError, match="no field made_up"):
        device.write_table(tmp_path, "Summary", [{"made_up": 1}], SCHEMA["tables"])


def test_the_profile_is_read_into_typed_records_and_hot_lines(tmp_path):
    p = xp.read(_tables(tmp_path, measured_ns=20_000.0))     # the device ran 2x the model's schedule
    assert p.schema_version == "7.4.0" and p.total_ns == pytest.approx(20_000.0)
    assert [(i.engine, i.start_ns, i.end_ns, i.sources) for i in p.instructions] == [
        ("scalar", 8_000, 14_000, (("kernel.py", 5),)), ("vector", 10_000, 12_000, (("kernel.py", 6),)),
        ("vector", 14_000, 18_000, (("kernel.py", 6),))]
    assert p.engine_busy_ns == {"scalar": 6_000, "vector": 6_000}
    assert p.dma_bytes() == {"input": 131072, "output": 65536} and len(p.dma) == 3
    fields = xp.profile_fields(p, "kernel.py")
    assert hotlines.decode(fields["hot_lines"]) == [
        hotlines.HotLine(5, "ScalarE", 6_000.0, 0.3), hotlines.HotLine(6, "VectorE", 6_000.0, 0.3)]
    assert fields["vector_engine_active_time_percent"] == pytest.approx(0.3)
    assert fields["dma_packet_count"] == 3 and fields["dma_input_bytes"] == 131072
    # without NKI_DEBUG_INFO the instructions name no line: no hot lines, and a note saying why
    bare = xp.profile_fields(xp.read(_tables(tmp_path / "bare", {**NEFF, "debug_info": False})), "kernel.py")
    assert "hot_lines" not in bare and "NKI_DEBUG_INFO=True" in bare["hot_lines_note"]


def test_a_split_table_is_read_whole_and_source_lists_count_for_each_line(tmp_path):
    import pyarrow.parquet as pq

    folder = _tables(tmp_path)
    whole = pq.read_table(folder / "Instruction.parquet")
    (folder / "Instruction.parquet").unlink()
    pq.write_table(whole.slice(0, 1), folder / "Instruction_0.parquet")
    rest = whole.slice(1).to_pydict()
    rest["nki_source_location"] = ["['kernel.py:6', 'kernel.py:9']", "/w/helpers.py:6"]
    pq.write_table(type(whole).from_pydict(rest, schema=whole.schema), folder / "Instruction_1.parquet")
    p = xp.read(folder)
    assert [i.sources for i in p.instructions] == [(("kernel.py", 5),), (("kernel.py", 6), ("kernel.py", 9)),
                                                   (("/w/helpers.py", 6),)]
    assert p.line_times("kernel.py") == {(5, "ScalarE"): 3_000, (6, "VectorE"): 1_000, (9, "VectorE"): 1_000}


@pytest.mark.parametrize("damage, message", [
    (dict(schema_version="12.0.1"), r"^Neuron Explorer profile schema 12\.0\.1 is not supported \(this project "
                                    r"reads schema 7\.x, the profile schema reference of Neuron 2\.31\)$"),
    (dict(truncate="Instruction"), r"^Instruction\.parquet is unreadable \(truncated or not Parquet\): .+$"),
])
def test_an_unknown_major_or_a_truncated_table_is_one_line(tmp_path, damage, message):
    with pytest.raises(xp.ProfileTablesError, match=message) as info:
        xp.read(_tables(tmp_path, **damage))
    assert "\n" not in str(info.value)
    assert xp.read(_tables(tmp_path / "minor", schema_version="7.9.2")).schema_version == "7.9.2"


def test_a_folder_that_is_no_profile_is_one_line(tmp_path):
    with pytest.raises(xp.ProfileTablesError, match="was not written"):
        xp.read(tmp_path / "none")
    folder = _tables(tmp_path)
    (folder / "Metadata.parquet").unlink()
    with pytest.raises(xp.ProfileTablesError, match="has no Metadata.parquet: not a Neuron Explorer Parquet profile"):
        xp.read(folder)


def test_the_fake_device_has_noise_drift_and_seeded_failures(tmp_path, monkeypatch):
    config_file = tmp_path / "device.json"
    monkeypatch.setenv("FAKE_NEURON_DEVICE", str(config_file))
    config_file.write_text("{}")

    def run(n, **config):
        config_file.with_suffix(".state").unlink(missing_ok=True)
        out = []
        for _ in range(n):
            try:
                out.append(device.execute(NEFF, device.DeviceConfig(**config))["measured_ns"])
            except RuntimeError as exc:
                out.append(str(exc))
        return out

    assert run(3, scale=1.5) == [15_000.0] * 3                          # the true latency, exactly
    assert run(3, drift=0.01) == pytest.approx([10_000.0, 10_100.0, 10_200.0])
    noisy = run(200, noise=0.02, seed=1)
    spread = [math.log(v / 10_000.0) for v in noisy]
    assert noisy == run(200, noise=0.02, seed=1) and noisy != run(200, noise=0.02, seed=2)
    assert abs(sum(spread) / len(spread)) < 0.005 and 0.015 < max(spread) - min(spread) < 0.2
    failed = [v for v in run(200, failure_rate=0.1) if isinstance(v, str)]
    assert 5 <= len(failed) <= 40 and "failed on the fake device" in failed[0]


# -- the trainium backend on the fake device --------------------------------------------------


def _official_silu_child(nkibench_dir) -> tuple[str, list]:
    """A child of the official NKIBench silu baseline (its ScalarE work moved to a fused
    activation by the offline rewrite) and the kernel's arguments."""
    from operators.rewrites.fuse import fuse_activation

    problem = load(make_spec("silu", suite_dir=str(nkibench_dir)))
    child = next(a for a in fuse_activation(problem.baseline_source) if "activation(silu)" in a.note).source
    return child, problem.to_kernel_inputs(problem.make_inputs(0))


def _runner(tmp_path, monkeypatch, target="trn1"):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for k, v in trainium.core_env(0, target).items():
        monkeypatch.setenv(k, v)
    return trainium.TrainiumRunner(target, {"profiler": "neuron-explorer"}), work


def test_acceptance_the_prompt_names_the_hot_lines_of_an_official_silu_child_from_the_device(
        tmp_path, monkeypatch, fake_toolchain, nkibench_dir):
    chain = fake_toolchain(compiler="2.21.18")
    chain.set_device(target="trn1", scale=1.2, noise=0.001, seed=3)
    source, args = _official_silu_child(nkibench_dir)
    runner, work = _runner(tmp_path, monkeypatch)
    latency, profile = runner.measure(source, args, None)
    views = [c["argv"] for c in chain.calls() if c["argv"][0] == "view"]
    assert views[-1][:5] == ["view", "--output-format", "parquet", "--output-file", str(work / trainium.TABLES_DIR)]
    model_ns = json.loads((work / runner.artifacts[0]).read_text())["latency_ns"]
    assert latency == pytest.approx(1.2 * model_ns * 1e-6, rel=0.01)       # the true latency, a little noise
    assert profile["profile_schema_version"] == "7.4.0" and profile["dma_packet_count"] > 0
    assert "measured on trn1 hardware" in profile["bottleneck"]
    hot = hotlines.decode(profile["hot_lines"])
    code = source.splitlines()
    # the fused silu activation is the busiest line of a compute engine (DMA transfers name no
    # source line on the device: DmaPacket has none), then the memset of its zero bias
    assert "nisa.activation(op=nl.silu" in code[hot[0].line - 1] and hot[0].engine == "ScalarE"
    assert hot[0].share == pytest.approx(profile["scalar_engine_active_time_percent"], rel=0.01)
    assert [h.engine for h in hot[1:]] == ["VectorE"] and "nisa.memset" in code[hot[1].line - 1]
    text = format_profile(Parent("child", source, 1.3, latency, 40.0, profile))
    assert "- hot lines (measured on trn1 hardware): share of the kernel's latency" in text
    first = f"  - line {hot[0].line}, {hot[0].engine}: {100 * hot[0].share:.1f}% ("
    assert first in text and "nisa.activation(op=nl.silu" in text
    assert "VectorE-bound (measured on trn1 hardware)" not in text and "DMA-bound (measured on trn1 hardware)" in text


def _failed_measure(runner, source, args):
    sent = []
    assert worker._measure(runner, source, args, None, None, lambda **m: sent.append(m)) is None
    (event,) = sent
    assert event["event"] == "failed" and "\n" not in event["message"]
    return event


@pytest.mark.parametrize("damage, message", [
    (dict(schema_version="12.0.1"), "profile schema 12.0.1 is not supported"),
    (dict(truncate="Instruction"), "Instruction.parquet is unreadable (truncated or not Parquet)"),
])
def test_acceptance_a_damaged_parquet_profile_fails_that_child_only(tmp_path, monkeypatch, fake_toolchain,
                                                                      damage, message):
    chain = fake_toolchain(nki="0.6.0")
    problem = load(make_spec("silu", "small", dialect="current"))
    source, args = problem.baseline_source, problem.to_kernel_inputs(problem.make_inputs(0))
    chain.set_device(target="trn2", **damage)
    runner, _ = _runner(tmp_path, monkeypatch, "trn2")
    runner.run(source, args)
    event = _failed_measure(runner, source, args)
    assert event["status"] == "crashed" and event["message"].startswith(
        "measuring the latency failed: ProfilerError: neuron-explorer view --output-format parquet: ")
    assert message in event["message"]
    # the next child of the run is measured as usual
    chain.set_device(target="trn2")
    latency, profile = trainium.TrainiumRunner("trn2", {"profiler": "neuron-explorer"}).measure(source, args, None)
    assert latency > 0 and hotlines.decode(profile["hot_lines"])


def test_acceptance_a_missing_neff_fails_that_child_with_one_line(tmp_path, monkeypatch, fake_toolchain):
    chain = fake_toolchain(nki="0.6.0")
    chain.set_device(target="trn2")
    problem = load(make_spec("silu", "small", dialect="current"))
    source, args = problem.baseline_source, problem.to_kernel_inputs(problem.make_inputs(0))
    runner, work = _runner(tmp_path, monkeypatch, "trn2")
    runner.run(source, args)
    real = trainium.run_tool

    def view_then_lose_the_neff(command):   # the NEFF vanishes after the last timed run's summary
        out = real(command)
        if "summary-json" in command and command[-1].endswith("kernel-010_exec_2.ntff"):
            (work / "kernel.neff").unlink()
        return out

    monkeypatch.setattr(trainium, "run_tool", view_then_lose_the_neff)
    event = _failed_measure(runner, source, args)
    assert event["message"] == "measuring the latency failed: ArtifactError: the NEFF kernel.neff was not written"


def test_a_device_failure_during_capture_fails_the_child_with_one_line(tmp_path, monkeypatch, fake_toolchain):
    chain = fake_toolchain(nki="0.6.0")
    chain.set_device(target="trn2", failure_rate=1.0)
    problem = load(make_spec("silu", "small", dialect="current"))
    source, args = problem.baseline_source, problem.to_kernel_inputs(problem.make_inputs(0))
    runner, _ = _runner(tmp_path, monkeypatch, "trn2")
    runner.run(source, args)
    event = _failed_measure(runner, source, args)
    assert "neuron-explorer capture failed (exit 1): ERROR: NRT execution 0 failed on the fake device" in event["message"]


def test_without_pyarrow_the_summary_alone_is_used(tmp_path, monkeypatch, fake_toolchain):
    chain = fake_toolchain(nki="0.6.0")
    problem = load(make_spec("silu", "small", dialect="current"))
    source, args = problem.baseline_source, problem.to_kernel_inputs(problem.make_inputs(0))
    runner, _ = _runner(tmp_path, monkeypatch, "trn2")
    runner.run(source, args)

    def missing():
        raise xp.ParquetUnavailable("reading Neuron Explorer's Parquet profile needs pyarrow (pip install pyarrow)")

    monkeypatch.setattr(xp, "require_pyarrow", missing)
    latency, profile = runner.measure(source, args, None)
    assert latency == pytest.approx(1.0) and "hot_lines" not in profile
    assert profile["profile_tables"].startswith("summary-json only: reading Neuron Explorer's Parquet profile needs")
    assert not [c for c in chain.calls() if "parquet" in c["argv"]]


def test_pyarrow_is_imported_only_where_tables_are_read():
    import subprocess
    import sys

    probe = ("import sys; import fitness.backends.trainium, fitness.backends.simulator, operators.llm.prompts; "
             "print('pyarrow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout
    assert out.strip() == "False"
