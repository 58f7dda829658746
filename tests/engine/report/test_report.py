"""Run reports: report.md and plots/*.png from whole, in-progress and damaged run folders."""

from __future__ import annotations

import difflib
import json
import math
import re
import shutil
import struct

import pytest

from accelopt_evo.cli.main import main
from accelopt_evo.report import markdown as report
from accelopt_evo.run.files import append_jsonl
from accelopt_evo.run.folder import RunFolder

from .runs import make_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> RunFolder:
    """A finished 3-generation run on silu and matmul (shape tiny), offline operators."""
    return make_run(tmp_path_factory.mktemp("runs"), gens=3, problems=("silu", "matmul"))


@pytest.fixture(scope="module")
def reported(finished, tmp_path_factory) -> tuple[RunFolder, str]:
    """A copy of the finished run with its report written once: (folder, report.md text)."""
    dest = tmp_path_factory.mktemp("reported") / "r"
    shutil.copytree(finished.root, dest)
    folder = RunFolder(dest)
    path = report.write_report(folder)
    assert path == folder.report
    return folder, path.read_text()


@pytest.fixture
def copy(finished, tmp_path):
    """A private copy of the finished run, to damage."""
    def make() -> RunFolder:
        dest = tmp_path / "copy"
        shutil.copytree(finished.root, dest)
        return RunFolder(dest)
    return make


def evaluations(folder: RunFolder) -> list[dict]:
    return [json.loads(line) for line in folder.evaluations.read_text().splitlines()]


def check_png(path) -> tuple[int, int]:
    """(width, height) of a PNG file that matplotlib can decode and that is not blank."""
    from matplotlib.image import imread

    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    pixels = imread(path)
    assert pixels.shape[:2] == (height, width)
    assert pixels.reshape(-1, pixels.shape[-1]).std(axis=0).max() > 0.01, f"{path.name} is blank"
    return width, height


def suite_rows(text: str) -> dict[str, dict[str, str]]:
    """The suite summary table: problem -> {column header: cell}."""
    section = text.split("## Suite summary")[1].split("\n## ")[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in table[2:]]
    assert header[:6] == ["problem", "baseline latency (ms)", "best latency (ms)", "speedup", "baseline % of peak",
                          "best % of peak"]
    return {r["problem"]: r for r in rows}


def embedded_plots(text: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\((plots/[^)]+\.png)\)", text)


def expected_geomean(folder: RunFolder) -> tuple[float, float]:
    """The suite's geometric mean % of peak (baseline, best), computed from the raw log."""
    base, best = {}, {}
    for r in evaluations(folder):
        if r["status"] != "ok":
            continue
        if r["operator"] == "baseline":
            base.setdefault(r["problem"], r["percent_of_peak"])
        if r["problem"] not in best or r["speedup"] > best[r["problem"]][0]:
            best[r["problem"]] = (r["speedup"], r["percent_of_peak"])
    def g(xs):
        xs = list(xs)
        return math.exp(sum(math.log(x) for x in xs) / len(xs))
    return g(base.values()), g(v[1] for v in best.values())


# --------------------------------------------------------------------------------------------


def test_report_of_a_short_run_has_the_percent_of_peak_table_and_plots(reported):
    folder, text = reported

    rows = suite_rows(text)
    assert list(rows) == ["silu", "matmul"]
    best = {r["problem"]: r for r in evaluations(folder) if r["status"] == "ok"
            and r["speedup"] == max(x["speedup"] or 0 for x in evaluations(folder) if x["problem"] == r["problem"])}
    for name, row in rows.items():
        assert row["speedup"] == f"{best[name]['speedup']:.3f}×"
        assert row["best % of peak"] == f"{best[name]['percent_of_peak']:.1f}%"
        assert row["figures"] == "simulated estimate for trn1"
    # tiny is not the paper's shape, so the paper's figures are marked as for scale only
    assert rows["silu"]["paper trn1: baseline → AccelOpt"] == "40% → 69% †"
    assert rows["matmul"]["paper trn1: baseline → AccelOpt"] == "62% → 83% †"
    g0, g1 = expected_geomean(folder)
    assert f"Geometric mean % of peak over 2 problem(s): {g0:.1f}% → {g1:.1f}%" in text

    plots = embedded_plots(text)
    assert len(plots) >= 3
    assert sorted(plots) == sorted(p.relative_to(folder.root).as_posix() for p in folder.plots.glob("*.png"))
    for rel in plots:
        width, height = check_png(folder.root / rel)
        assert width >= 600 and height >= 300
    for name in ("best_speedup", "percent_of_peak", "fitness_distribution", "outcomes_by_generation",
                 "outcomes_by_operator", "lineage_silu", "lineage_matmul"):
        assert f"plots/{name}.png" in plots
    assert "drawing failed" not in text
    assert "Every file of the run folder was read whole." in text


def test_offline_run_says_there_were_no_llm_calls(reported):
    folder, text = reported
    assert "No LLM call: the run used offline operators only." in text
    assert not (folder.plots / "llm_tokens.png").exists() and not (folder.plots / "llm_cost.png").exists()


def test_memory_table_lists_every_entry_with_its_full_rationale(reported):
    folder, text = reported
    entries = json.loads(folder.memory.read_text())["entries"]
    assert entries, "the short run admits memory entries"
    table = text.split("## Optimization memory")[1].split("### Rationales")[0]
    assert len([line for line in table.splitlines() if re.match(r"\| \d+ \|", line)]) == len(entries)
    for e in entries:
        assert f"| {e['problem']} | {e['kind']} | {e['speedup']:.3f}× |" in table
        assert e["rationale"].splitlines()[0] in table
        assert e["rationale"] in text.split("### Rationales")[1]


def test_best_kernel_is_shown_with_its_diff_against_the_baseline(reported):
    folder, text = reported
    section = text.split("## Best kernels")[1].split("### matmul")[0]
    best = (folder.best / "silu.py").read_text()
    base = next(folder.read_kernel(r["kernel_id"]) for r in evaluations(folder)
                if r["problem"] == "silu" and r["operator"] == "baseline")
    assert best != base, "the short run improves on the silu baseline"
    diff = "\n".join(difflib.unified_diff(base.splitlines(), best.splitlines(), "baseline/silu.py", "best/silu.py",
                                          lineterm=""))
    assert diff in section


def test_best_kernel_shows_its_hot_lines_as_the_prompts_do(reported):
    from fitness.measures import hotlines
    from fitness.result import EvalResult
    from accelopt_evo.run.records import KernelMeta

    folder, _ = reported
    best = (folder.best / "silu.py").read_text()
    hot = [hotlines.HotLine(3, "DMA", 2.5e5, 0.5), hotlines.HotLine(5, "ScalarE", 1e5, 0.2)]
    profile = {"bottleneck": "DMA-bound (simulated trn1): DMA bandwidth used 50% of the time",
               hotlines.HOT_LINES: hotlines.encode(hot)}
    kernel = report.Kernel.of("silu", KernelMeta("k", (), "tune_mutation", 1, "", EvalResult(
        "ok", latency_ms=0.5, profile=profile, speedup=1.2)))
    lines = report._hot_lines(kernel, best)
    code = best.splitlines()
    assert lines[0] == "Hot lines (simulated trn1): share of the kernel's latency each line keeps an engine busy:"
    assert lines[2].startswith(f"- line 3, DMA: 50.0% (0.250 ms): `{code[2].strip()[:20]}")
    assert lines[3].startswith("- line 5, ScalarE: 20.0% (0.100 ms)") and lines[-1] == ""
    # a profile without hot lines (or a damaged record) adds nothing
    assert report._hot_lines(report.Kernel.of("silu", KernelMeta("k", (), "x", 1, "", EvalResult(
        "ok", latency_ms=0.5, profile={hotlines.HOT_LINES: "[[0, 1]]"}))), best) == []


def test_lineage_runs_from_the_baseline_to_the_best_kernel(reported):
    folder, text = reported
    data = report.collect(folder)
    index = report.kernel_index(data)
    best = report.best_kernel(data, "silu")
    assert (folder.best / "silu.py").read_text() == folder.read_kernel(best.id)
    chain, ancestors = report.lineage(best, index)
    assert chain[0].operator == "baseline" and chain[-1].id == best.id
    for parent, child in zip(chain, chain[1:]):
        assert parent.id in child.parent_ids
        assert parent.generation <= child.generation
    assert {k.id for k in chain} <= {k.id for k in ancestors}
    assert "- Operators: auto (offline: knobs found in the kernels and structural rewrites)" in text
    table = text.split("## Lineage of the best kernels")[1].split("### matmul")[0]
    assert re.findall(r"^\| \d+ \| `(\w+)` \|", table, re.M) == [k.id for k in chain]
    # what each operator did is in evaluations.jsonl, for kernels that left the population too
    notes = {r["kernel_id"]: r.get("note", "") for r in evaluations(folder)}
    assert all(notes[k.id] and k.note == notes[k.id] for k in ancestors if k.operator != "baseline")


def test_lineage_follows_the_fastest_parent_of_a_crossover():
    def k(id, speedup, parents=(), op="tune_mutation"):
        return report.Kernel(id, "p", 0, op, parents, "ok", 1.0, speedup, 50.0, "simulator", "trn1")
    kernels = [k("base", 1.0, op="baseline"), k("slow", 0.9, ("base",)), k("fast", 1.3, ("base",)),
               k("x", 1.5, ("slow", "fast"), "tune_crossover")]
    index = {("p", kk.id): kk for kk in kernels}
    chain, ancestors = report.lineage(index[("p", "x")], index)
    assert [c.id for c in chain] == ["base", "fast", "x"]
    assert {a.id for a in ancestors} == {"base", "slow", "fast", "x"}


def test_crash_mid_generation_still_renders_and_says_what_is_missing(copy):
    folder = copy()
    folder.checkpoint_path(3).unlink()          # killed before the generation's checkpoint
    text = folder.evaluations.read_text()
    folder.evaluations.write_text(text[: len(text) - 40])   # and in the middle of an append
    folder.memory.unlink()
    out = report.write_report(folder).read_text()
    assert "generation(s) 3 have evaluations but no checkpoint" in out
    assert "the last line is cut short" in out
    assert "memory.json is missing; the memory shown is the one of the newest checkpoint" in out
    assert "generation 2 of 3 checkpointed (the run is in progress" in out
    assert "Geometric mean % of peak over 2 problem(s)" in out
    plots = embedded_plots(out)
    assert len(plots) >= 3
    for rel in plots:
        check_png(folder.root / rel)


def test_missing_and_unreadable_checkpoints_are_reported(copy):
    folder = copy()
    folder.checkpoint_path(1).unlink()
    newest = folder.checkpoint_path(3)
    newest.write_bytes(newest.read_bytes()[:200])
    out = report.write_report(folder).read_text()
    assert "checkpoints/gen-0003.json is unreadable" in out
    assert "checkpoint(s) of generation(s) 1 are missing" in out
    assert "plots/fitness_distribution.png" in out
    data = report.collect(folder)
    assert data.checkpoint_gens == [0, 2] and sorted(data.population["silu"]) == [0, 2]


def test_no_checkpoint_and_no_memory_uses_the_evaluations_alone(copy):
    folder = copy()
    shutil.rmtree(folder.checkpoints)
    folder.memory.unlink()
    out = report.write_report(folder).read_text()
    assert "no checkpoint: populations, hall of fame and logbook are unknown" in out
    assert "the optimization memory is unknown" in out
    assert "No memory recorded" in out
    assert "*No plot of the population's fitness per generation: no readable checkpoint.*" in out
    g0, g1 = expected_geomean(folder)
    assert f"Geometric mean % of peak over 2 problem(s): {g0:.1f}% → {g1:.1f}%" in out
    assert "+++ best/silu.py" in out


def test_a_run_that_never_finished_generation_zero(tmp_path):
    folder = RunFolder(tmp_path / "r")
    folder.root.mkdir()
    folder.config.write_text('[run]\ngens = 5\nproblems = ["silu"]\n')
    out = report.write_report(folder).read_text()
    assert "no generation checkpointed yet" in out
    assert "evaluations.jsonl is missing" in out
    assert out.count("No problem has data yet.") == 3
    assert embedded_plots(out) == []
    assert "*No plot of the best speedup per generation: no correct kernel evaluated yet.*" in out


def test_damaged_lines_are_skipped_and_counted(copy):
    folder = copy()
    lines = folder.evaluations.read_text().splitlines()
    lines.insert(3, "{not json")
    lines.insert(5, json.dumps({"status": "ok"}))   # no generation, problem or kernel id
    folder.evaluations.write_text("\n".join(lines) + "\n")
    out = report.write_report(folder).read_text()
    assert "evaluations.jsonl: 1 unreadable line(s) skipped" in out
    assert "evaluations.jsonl: 1 record(s) without generation, problem, kernel id or status skipped" in out


def test_llm_calls_give_a_cost_table_and_plots(copy):
    folder = copy()
    calls = []
    for gen in range(4):
        for role, tokens, cost in (("planner", (900, 300), 0.002), ("implementer", (2000, 1500), 0.01),
                                   ("summarizer", (700, 100), 0.001)):
            calls.append(dict(role=role, model="m1", prompt_hash=f"h{gen}{role}", prompt_tokens=tokens[0],
                              completion_tokens=tokens[1], cost_usd=cost, seconds=1.5, status="ok", cached=False,
                              generation=gen))
    calls.append(dict(role="implementer", model="m1", prompt_hash="c", prompt_tokens=0, completion_tokens=0,
                      cost_usd=0.0, seconds=0.0, status="ok", cached=True, generation=2))
    calls.append(dict(role="repair", model="m2", prompt_hash="r", prompt_tokens=50, completion_tokens=0,
                      cost_usd=0.0, seconds=3.0, status="timeout", cached=False))      # no generation field
    for c in calls:
        append_jsonl(folder.llm_calls, c)
    out = report.write_report(folder).read_text()
    section = out.split("## LLM use and cost")[1].split("## Lineage")[0]
    total = next(line for line in section.splitlines() if line.startswith("| **total**"))
    prompt = sum(c["prompt_tokens"] for c in calls)
    completion = sum(c["completion_tokens"] for c in calls)
    assert total == f"| **total** |  | {len(calls)} | 1 | 1 | {prompt:,} | {completion:,} | {4 * 0.013:.4f} |"
    assert "| implementer | m1 | 5 | 1 | 0 | 8,000 | 6,000 | 0.0400 |" in section
    assert "1 call(s) carry no generation" in section
    for name in ("llm_tokens", "llm_cost"):
        assert f"plots/{name}.png" in section
        check_png(folder.plots / f"{name}.png")


def test_llm_calls_without_prices_have_no_cost_plot(copy):
    folder = copy()
    for gen in range(2):
        append_jsonl(folder.llm_calls, dict(role="implementer", model="m", prompt_hash="h", prompt_tokens=10,
                                            completion_tokens=5, cost_usd=0.0, seconds=1.0, status="ok",
                                            cached=False, generation=gen))
    out = report.write_report(folder).read_text()
    assert "plots/llm_tokens.png" in out
    assert "*No plot of LLM cost per generation: every call cost $0" in out
    assert not (folder.plots / "llm_cost.png").exists()


def test_cli_report_prints_the_path_and_replaces_an_earlier_report(copy, capsys):
    folder = copy()
    assert main(["report", str(folder.root)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {folder.report}"
    first = folder.report.read_text()
    (folder.plots / "stale.png").write_bytes(PNG_SIGNATURE)
    assert report.write_report(folder).read_text() == first
    assert not (folder.plots / "stale.png").exists()


def test_figures_say_how_they_were_obtained():
    assert report.figure_label("simulator", "trn2") == "simulated estimate for trn2, uncalibrated"
    assert report.figure_label("simulator", "trn1") == "simulated estimate for trn1"
    assert report.figure_label("trainium", "trn1") == "measured on trn1 hardware"


def test_paper_figures_match_the_nkibench_reference(nkibench_dir):
    text = " ".join((nkibench_dir / "README.md").read_text().split())
    listed = dict((name, (int(a), int(b))) for name, a, b in re.findall(r"(\w+) (\d+)->(\d+)", text))
    aliases = {"rope": "rope_single_freq_apply", "gqa": "gqa_full"}
    assert {aliases.get(n, n): v for n, v in listed.items()} == report.PAPER_TRN1
    assert "trn1 49% -> 61%, trn2 45% -> 59%" in text


def test_paper_per_kernel_figures_agree_with_the_paper_geomean():
    base = report.geomean(b for b, _ in report.PAPER_TRN1.values())
    best = report.geomean(a for _, a in report.PAPER_TRN1.values())
    assert (round(base), round(best)) == report.PAPER_GEOMEAN["trn1"]
