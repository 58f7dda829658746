"""`serve`: the JSON views of a run folder, following a folder as it grows, the HTTP server's
refusals, and that serving leaves the folder as it was."""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from accelopt_evo.cli import main as cli
from accelopt_evo.report import markdown as report
from accelopt_evo.report.serve import views
from accelopt_evo.report.serve.follow import FollowedRun, follow
from accelopt_evo.report.serve.server import STATIC, Site, run_names, start
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.run.records import (
    read_checkpoint,
    read_evaluations,
    read_llm_calls,
    read_memory_file,
    rewrite_evaluations,
)
from accelopt_evo.search.descriptors import descriptors
from operators.diff import kernel_diff
from operators.llm.ledger import billed_totals

from .folders import IMG, PAYLOAD, SCRIPT, add_markup_kernel
from fakes import ProfilingEvaluator
from engine.report.runs import make_run

DATA = Path(__file__).resolve().parents[3] / "data"
REPO = Path(__file__).resolve().parents[4]


@pytest.fixture
def folder(tmp_path) -> RunFolder:
    """A copy of an LLM run folder of an earlier release (generations 0-2 of silu)."""
    dest = tmp_path / "run-llm"
    shutil.copytree(DATA / "run-v1-llm", dest)
    return RunFolder(dest)


def site_of(*folders: RunFolder) -> Site:
    runs = follow([f.root for f in folders], min_interval_s=0)
    return Site(runs, run_names(runs))


def get(site: Site, target: str) -> tuple[int, dict]:
    answer = site.answer(target)
    assert answer.content_type.startswith("application/json")
    return answer.status, json.loads(answer.body)


def test_summary_has_the_report_figures(folder):
    status, s = get(site_of(folder), "/api/run/0/summary")
    assert status == 200
    data = report.collect(folder)
    assert s["name"] == "run-llm" and s["label"] == "simulated estimate for trn1"
    assert [p["name"] for p in s["problems"]] == ["silu"]
    silu = s["problems"][0]
    assert silu["series"] == [list(p) for p in report.best_series(data, "silu")] and len(silu["series"]) == 3
    assert silu["label"] == "simulated estimate for trn1"
    assert silu["baseline"]["id"] == "a177d1e9dbccc155" and silu["baseline"]["speedup"] == 1.0
    assert silu["best"]["id"] == report.best_kernel(data, "silu").id
    fresh = [e for e in read_evaluations(folder.evaluations).records if not e.reused]
    assert silu["statuses"] == dict(Counter(e.result.status for e in fresh))
    assert sum(sum(c.values()) for _, c in silu["statuses_by_generation"]) == len(fresh)
    calls = read_llm_calls(folder.llm_calls).records
    spent = billed_totals(calls)
    assert s["llm"]["calls"] == len(calls) and s["llm"]["billed_calls"] == spent.calls
    assert s["llm"]["tokens"] == spent.tokens and s["llm"]["cost_usd"] == pytest.approx(spent.cost_usd)
    assert s["llm"]["budget"] == {"max_usd": 0.0, "max_tokens": 0, "max_llm_calls": 0}
    assert silu["llm"]["calls"] == sum(c.problem == "silu" for c in calls)
    assert s["generation"] == 2 and s["gens"] == 2 and s["evaluating"] is None
    assert s["notes"] == data.notes
    assert s["status_colors"]["ok"] and "not_judged" in s["statuses"]


def test_tree_and_kernel_views(folder):
    site = site_of(folder)
    status, tree = get(site, "/api/run/0/tree?problem=silu")
    assert status == 200
    index = report.kernel_index(report.collect(folder))
    assert {n["id"] for n in tree["nodes"]} == {k for p, k in index if p == "silu"}
    assert tree["baseline"] == "a177d1e9dbccc155" and tree["chain"][0] == tree["baseline"]
    assert tree["chain"][-1] == tree["best"]
    node = next(n for n in tree["nodes"] if n["id"] == "625cc02b51d88904")
    assert node["parents"] == ["535b0cca71c694dc"] and node["status"] == "ok" and node["generation"] == 2

    status, k = get(site, "/api/run/0/kernel?problem=silu&id=625cc02b51d88904")
    assert status == 200
    source = folder.read_kernel("625cc02b51d88904")
    assert k["source"] == source
    assert k["diffs"] == [{"parent": "535b0cca71c694dc",
                           "diff": kernel_diff(folder.read_kernel("535b0cca71c694dc"), source, views.MAX_DIFF_LINES)}]
    assert k["operator"] == "llm_mutation" and k["status"] == "ok" and k["label"] == "simulated estimate for trn1"
    assert k["bottleneck"] == "fake" and "bottleneck" not in k["profile"]
    assert [p["id"] for p in k["parents"]] == ["535b0cca71c694dc"]
    assert [lesson["child_id"] for lesson in k["lessons"]] == ["625cc02b51d88904"]
    assert k["lessons"][0]["rationale"]

    _, failed = get(site, "/api/run/0/kernel?problem=silu&id=a657da905b005324")
    assert failed["status"] == "compile_error" and failed["error"] and len(failed["diffs"]) == 2

    for bad in ("/api/run/0/kernel?problem=silu&id=0123456789abcdef", "/api/run/0/kernel?problem=silu&id=../config",
                "/api/run/0/kernel?problem=nope&id=625cc02b51d88904", "/api/run/0/tree?problem=nope",
                "/api/run/1/summary", "/api/run/0/nothing", "/api/nothing"):
        assert get(site, bad)[0] == 404, bad


def test_summary_shows_the_strategy_state_the_run_folder_records(folder, tmp_path):
    """Islands (members, best speedups, migrations) with novelty, and a MAP-Elites archive (its
    grid's occupied cells), as the newest checkpoint and its logbook record them; none for one
    population without novelty. The report's "Diversity" section reads the same."""
    isles = make_run(tmp_path, gens=2, run_id="islands", report=False,
                     sets=['selection.strategy="islands"', "selection.islands=2", "selection.migration_interval=1",
                           "variation.novelty=0.005"])
    elites = make_run(tmp_path, gens=2, run_id="elites", report=False, evaluator=ProfilingEvaluator,
                      sets=['selection.strategy="map_elites"', "selection.dma_bins=8"])
    site = site_of(isles, elites, folder)
    _, s = get(site, "/api/run/0/summary")
    ck = read_checkpoint(isles.checkpoint_path(2))
    log = ck.logbook["silu"]
    d = s["diversity"]
    assert (d["strategy"], d["novelty"], d["dma_bins"]) == ("islands", 0.005, 4)
    silu = d["problems"][0]
    assert silu["name"] == "silu" and silu["generation"] == 2
    assert [[m["id"] for m in island["members"]] for island in silu["islands"]] == ck.islands["silu"]
    assert [island["best"] for island in silu["islands"]] == log[-1]["islands_best"]
    speedups = {m.id: m.result.speedup for m in ck.population["silu"]}
    assert all(m["speedup"] == speedups[m["id"]] for island in silu["islands"] for m in island["members"])
    assert silu["migrated"] == sum(e["migrated"] for e in log) > 0
    assert silu["novelty_rejected"] == sum(e.get("novelty_rejected", 0) for e in log)
    assert "archive" not in silu
    markdown = "\n".join(report._diversity(report.collect(isles)))
    assert f"{silu['migrated']} kernel(s) migrated" in markdown and "2 islands" in markdown

    _, s = get(site, "/api/run/1/summary")
    ck = read_checkpoint(elites.checkpoint_path(2))
    silu = s["diversity"]["problems"][0]
    cells = {(c["engine"], c["bin"]): c for c in silu["archive"]}
    assert len(cells) == len(silu["archive"]) == silu["archive_cells"] == len(ck.population["silu"]) > 1
    for m in ck.population["silu"]:     # each elite in its cell, by its descriptors
        d = descriptors(m.result)
        cell = cells[(d["engine"], min(7, int(d["dma_share"] * 8)))]
        assert cell["id"] == m.id and cell["speedup"] == m.result.speedup
    assert silu["archive_placed"] == sum(e["archive_placed"] for e in ck.logbook["silu"])
    assert "islands" not in silu and "novelty_rejected" not in silu
    assert get(site, "/api/run/2/summary")[1]["diversity"] is None


def test_memory_newest_first(folder):
    _, memory = get(site_of(folder), "/api/run/0/memory")
    entries = read_memory_file(folder.memory).entries
    assert len(memory["entries"]) == len(entries) == 3
    assert [e["generation"] for e in memory["entries"]] == [2, 1, 0]
    newest = memory["entries"][0]
    assert (newest["parent_id"], newest["child_id"]) == ("535b0cca71c694dc", "625cc02b51d88904")
    assert newest["rationale"] == entries[2].rationale and newest["diff"] == entries[2].diff


def test_markup_from_the_run_is_passed_as_text(folder):
    kid = add_markup_kernel(folder)
    site = site_of(folder)
    _, k = get(site, f"/api/run/0/kernel?problem=silu&id={kid}")
    assert SCRIPT in k["source"] and IMG in k["source"] and SCRIPT in k["error"]
    assert IMG in k["note"] and IMG in k["bottleneck"]
    _, memory = get(site, "/api/run/0/memory")
    assert PAYLOAD in memory["entries"][0]["rationale"]


def test_a_growing_evaluations_file_is_read_from_where_the_last_read_stopped(folder):
    run = FollowedRun(folder, min_interval_s=0)
    offsets: list[int] = []
    read = run.evaluations._read_new

    def spy(path, offset):
        offsets.append(offset)
        return read(path, offset)

    run.evaluations._read_new = spy
    v0 = run.look()
    size = folder.evaluations.stat().st_size
    assert offsets == [0] and run.evaluations.offset == size
    count = len(run.data().evaluations)
    assert run.look() == v0 and offsets == [0]                   # nothing changed: nothing read

    last = json.loads(folder.evaluations.read_text().splitlines()[-1])
    line = json.dumps({**last, "generation": 3, "kernel_id": "0123456789abcdef"}) + "\n"
    with folder.evaluations.open("a") as f:                         # the run is half-way through a line
        f.write(line[:40])
    v1 = run.look()
    assert v1 > v0 and offsets == [0, size] and run.evaluations.offset == size
    assert len(run.data().evaluations) == count and run.evaluations.lines.torn
    assert any("evaluations.jsonl: the last line is cut short" in n for n in run.data().notes)
    with folder.evaluations.open("a") as f:
        f.write(line[40:])
    v2 = run.look()
    assert v2 > v1 and offsets == [0, size, size]
    data = run.data()
    assert len(data.evaluations) == count + 1 and data.evaluations[-1].kernel_id == "0123456789abcdef"
    assert not run.evaluations.lines.torn and run.evaluations.offset == folder.evaluations.stat().st_size
    assert not any("cut short" in n for n in data.notes)

    # a resume rewrites the file whole (a new, shorter file): read again from its start
    kept = [e for e in read_evaluations(folder.evaluations).records if e.generation == 0]
    rewrite_evaluations(folder.evaluations, kept)
    run.look()
    assert offsets[-1] == 0 and [e.kernel_id for e in run.data().evaluations] == [e.kernel_id for e in kept]


def test_a_new_checkpoint_and_memory_are_seen(folder):
    site = site_of(folder)
    _, before = get(site, "/api/run/0/summary")
    data = json.loads(folder.checkpoint_path(2).read_text())
    folder.checkpoint_path(3).write_text(json.dumps({**data, "generation": 3}))
    memory = json.loads(folder.memory.read_text())
    memory["entries"] = memory["entries"][:1]
    folder.memory.write_text(json.dumps(memory))
    _, after = get(site, "/api/run/0/summary")
    assert after["version"] > before["version"] and (before["generation"], after["generation"]) == (2, 3)
    assert len(get(site, "/api/run/0/memory")[1]["entries"]) == 1


def _snapshot(root: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir",
                                       p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def test_serving_changes_nothing_in_the_run_folder(folder):
    kid = add_markup_kernel(folder)
    before = _snapshot(folder.root)
    server = start(follow([folder.root], min_interval_s=0), "127.0.0.1", 0)
    try:
        targets = ["/", "/static/app.js", "/api/runs", "/api/run/0/summary", "/api/run/0/memory",
                   "/api/run/0/tree?problem=silu", f"/api/run/0/kernel?problem=silu&id={kid}"]
        targets += [f"/api/run/0/kernel?problem=silu&id={p.stem}" for p in folder.kernels.iterdir()]
        for target in targets:
            with urllib.request.urlopen(server.url.rstrip("/") + target) as response:
                assert response.status == 200, target
    finally:
        server.close()
    assert _snapshot(folder.root) == before


def _raw(server, method: str, path: str, host: str | None = None) -> tuple[int, bytes, dict]:
    port = server.httpd.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest(method, path, skip_host=True)
    conn.putheader("Host", host or f"127.0.0.1:{port}")
    conn.endheaders()
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, body, dict(response.getheaders())


def test_http_serves_only_the_page_and_refuses_the_rest(folder):
    server = start(follow([folder.root]), "127.0.0.1", 0)
    try:
        status, body, headers = _raw(server, "GET", "/")
        assert status == 200 and b'<script src="/static/app.js"' in body
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert _raw(server, "GET", "/static/app.js")[0] == 200
        for path in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/..%2fserver.py",
                     "/static/../../runfolder.py", "/../../../etc/passwd", "/static//etc/passwd",
                     "/static/" + str(STATIC / "app.js"), "/config.toml", "/kernels/a177d1e9dbccc155.py",
                     "/api/run/0/../../config.toml",
                     # run indices are ASCII decimals: other scripts' digits and superscripts are no alias
                     "/api/run/%C2%B2/summary", "/api/run/%D9%A0/summary", "/api/run/%EF%BC%90/summary",
                     "/api/run/+0/summary", "/api/run/%200/summary"):
            status, body, _ = _raw(server, "GET", path)
            assert status == 404 and b"import" not in body, path
        assert _raw(server, "GET", "/api/runs", host="attacker.example")[0] == 403   # DNS rebinding
        assert _raw(server, "GET", "/api/runs", host=f"localhost:{server.httpd.server_address[1]}")[0] == 200
        assert _raw(server, "POST", "/api/runs")[0] == 501
        status, body, headers = _raw(server, "HEAD", "/api/runs")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
    finally:
        server.close()


def test_the_page_sets_untrusted_text_as_text_only():
    """Static guard beside the browser test: the page's script never parses data as markup."""
    script = (STATIC / "app.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                 "DOMParser", "createContextualFragment"):
        assert sink not in script, sink
    for name in ("index.html", "app.js", "style.css"):
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", (STATIC / name).read_text()), name  # no network


def test_serve_command_errors_are_one_line(folder, tmp_path, capsys):
    assert cli.main(["serve", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: '{tmp_path}' is not a run folder (no config.toml)"
    assert cli.main(["serve", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["serve", str(folder.root), "--port", str(port)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"port {port} on 127.0.0.1 is in use" in err
    assert cli.main(["serve", str(folder.root), "--port", "70000"]) == 2
    assert "--port 70000 is not a port" in capsys.readouterr().err


def test_serve_command_serves_until_interrupted(folder, monkeypatch, capsys):
    seen = {}

    def interrupted() -> None:       # instead of waiting for Ctrl-C: fetch the page once
        url = re.search(r"page: (\S+)", capsys.readouterr().out).group(1)
        with urllib.request.urlopen(url + "api/runs") as response:
            seen.update(json.load(response))

    monkeypatch.setattr(cli, "_wait_for_interrupt", interrupted)
    assert cli.main(["serve", str(folder.root), str(DATA / "run-v1"), "--port", "0"]) == 0
    assert [r["name"] for r in seen["runs"]] == ["run-llm", "run-v1"]


@pytest.mark.slow
def test_run_serve_follows_the_run_it_starts(tmp_path):
    """`run --serve`: the page is up before the run folder exists, follows the run, and stays
    after it until Ctrl-C (exit status 0)."""
    cmd = [sys.executable, "-m", "accelopt_evo", "run", "--serve", "--port", "0", "--gens", "1", "--problem", "silu",
           "--set", "run.shape=\"tiny\"", "--set", "run.report=false", "--set", "population.size=4",
           "--set", "population.offspring=4", "--operators", "tuning", "--no-progress",
           "--out", str(tmp_path), "--run-id", "live"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = re.search(r"page: (\S+)", proc.stdout.readline()).group(1)
        generations = set()
        while True:
            line = proc.stdout.readline()
            with urllib.request.urlopen(url + "api/run/0/summary") as response:
                generations.add(json.load(response)["generation"])
            if "the run is over" in line or not line:
                break
        assert "the run is over" in line and generations & {0, 1}
        deadline = time.monotonic() + 10
        while True:     # the server looks at the folder at most every half second
            with urllib.request.urlopen(url + "api/run/0/summary") as response:
                summary = json.load(response)
            if summary["generation"] == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert summary["generation"] == 1 and len(summary["problems"][0]["series"]) == 2
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
