"""`serve`'s page in a real browser (headless Chromium): a finished run's curve, lineage tree,
kernel view and memory; a run being written, seen to grow without a reload; a kernel whose
text is markup, shown as text; two runs on the same axes, one of them with its islands. A
screenshot of each view goes to .ci/screenshots/ (a CI artifact)."""

from __future__ import annotations

import json
import time

import pytest

from accelopt_evo.report.serve.follow import follow
from accelopt_evo.report.serve.server import start

from .folders import IMG, SCRIPT, add_markup_kernel, rewind
from browser import SCREENSHOTS, chromium, missing, required, wait_for
from engine.report.runs import make_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser():
    why = missing()
    if why:
        if required():
            pytest.fail(f"the browser test needs a browser: {why}")
        pytest.skip(f"no browser to drive: {why}")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with chromium(1280, 1000) as driver:
        driver.set_script_timeout(10)
        yield driver


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished runs of silu and matmul (seeds 0 and 1); the first holds a markup kernel, the
    second evolves two islands."""
    out = tmp_path_factory.mktemp("runs")
    first = make_run(out, gens=3, problems=("silu", "matmul"), run_id="seed0", report=False)
    second = make_run(out, gens=3, problems=("silu", "matmul"), run_id="seed1", seed=1, report=False,
                      sets=['selection.strategy="islands"', "selection.islands=2"])
    return first, second, add_markup_kernel(first)


@pytest.fixture(scope="module")
def page(runs):
    """The page of both runs; its URL."""
    server = start(follow([runs[0].root, runs[1].root]), "127.0.0.1", 0)
    yield server.url
    server.close()


def open_page(driver, url: str) -> None:
    driver.get("about:blank")
    driver.get(url)
    wait_for(driver, "return document.body.dataset.ready === '1'", what="the page drawn")


def api(driver, url: str, path: str) -> dict:
    """A view as the page gets it (fetched from within the page)."""
    return driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0]).then((r) => r.json()).then(done, (e) => done({error: String(e)}));", url + path)


def shot(driver, element_id: str, name: str) -> None:
    driver.execute_script("document.getElementById(arguments[0]).scrollIntoView()", element_id)
    driver.find_element("id", element_id).screenshot(str(SCREENSHOTS / f"{name}.png"))


def points(driver, chart: str, series: str, within: str = "") -> int:
    """How many points a series has in a chart."""
    return driver.execute_script(
        "return document.querySelectorAll(arguments[0]).length",
        f"{within} #{chart} g.series[data-series='{series}'] circle.point" if chart else
        f"{within} g.series[data-series='{series}'] circle.point")


def test_finished_run(browser, page, runs):
    first = runs[0]
    open_page(browser, page + "#run=0&problem=silu")
    summary = api(browser, page, "api/run/0/summary")
    silu = next(p for p in summary["problems"] if p["name"] == "silu")
    assert points(browser, "chart-speedup", "seed0") == len(silu["series"]) == 4   # generations 0-3
    assert points(browser, "chart-peak", "seed0") == 4
    assert browser.execute_script("return document.querySelectorAll('#grid .mini').length") == 2
    stats = browser.find_element("css selector", "#stats table.stats tr[data-run='0']").text
    assert "simulated estimate for trn1" in stats and f"{silu['best']['speedup']:.3f}×" in stats
    shot(browser, "overview", "overview")
    shot(browser, "progress", "progress")

    tree = api(browser, page, "api/run/0/tree?problem=silu")
    assert browser.execute_script("return document.querySelectorAll('#tree g.node').length") == len(tree["nodes"])
    assert browser.execute_script("return document.querySelectorAll('#tree path.edge.chain').length") == \
        len(tree["chain"]) - 1
    best = tree["best"]
    assert tree["chain"][-1] == best and best != tree["baseline"]
    shot(browser, "lineage", "lineage")

    browser.find_element("css selector", f"#tree g.node[data-id='{best}']").click()    # open a kernel
    wait_for(browser, "return document.getElementById('kernel-source')", what="the kernel view")
    assert browser.execute_script("return location.hash").endswith(f"kernel={best}")
    source = browser.execute_script("return document.getElementById('kernel-source').textContent")
    assert source == first.read_kernel(best)
    diff = browser.execute_script("return document.getElementById('kernel-diff').textContent")
    assert diff.startswith("--- parent.py\n+++ child.py") and browser.find_elements("css selector", "#kernel-diff .add")
    facts = browser.find_element("css selector", "#kernel-body dl.facts").text
    assert "best kernel of the run" in facts and "simulated estimate for trn1" in facts
    assert browser.execute_script("return document.getElementById('kernel-note').textContent")
    shot(browser, "kernel", "kernel")

    memory = api(browser, page, "api/run/0/memory")["entries"]
    lessons = browser.find_elements("css selector", "#memory-body .lesson")
    assert len(lessons) == len(memory) > 1
    assert [e.get_attribute("data-child") for e in lessons] == [e["child_id"] for e in memory]   # newest first
    assert memory[0]["generation"] >= memory[-1]["generation"]
    shot(browser, "memory", "memory")


def test_markup_in_the_run_is_shown_as_text(browser, page, runs):
    kid = runs[2]
    open_page(browser, page + f"#run=0&problem=silu&kernel={kid}")
    wait_for(browser, "return document.getElementById('kernel-source')", what="the kernel view")
    text = browser.execute_script(
        "return ['kernel-source', 'kernel-error', 'kernel-note', 'kernel-bottleneck']"
        ".map((id) => document.getElementById(id).textContent)")
    assert SCRIPT in text[0] and IMG in text[0]
    assert SCRIPT in text[1] and IMG in text[1] and IMG in text[2] and SCRIPT in text[2] and IMG in text[3]
    rationale = browser.find_element("css selector", f"#memory-body .lesson[data-child='{kid}'] .rationale")
    assert SCRIPT in rationale.get_attribute("textContent")
    time.sleep(0.5)     # room for an image error handler to fire, had an element been made
    assert browser.execute_script("return window.__xss") is None
    assert browser.execute_script("return document.querySelectorAll('img, body script, iframe, object').length") == 0
    assert browser.execute_script("return document.scripts.length") == 1     # app.js alone
    assert not [e for e in browser.get_log("browser") if "Content Security Policy" in e["message"]]
    shot(browser, "kernel", "kernel-with-markup")


def test_two_runs_side_by_side(browser, page):
    open_page(browser, page + "#run=1&problem=matmul")
    for run in ("seed0", "seed1"):
        assert points(browser, "chart-speedup", run) == 4, run
        assert points(browser, "", run, within="#grid .mini[data-problem='silu']") == 4
    assert browser.find_elements("css selector", "#stats table.stats tr[data-run='1']")
    chips = browser.find_element("id", "runs").text
    assert "seed0" in chips and "seed1" in chips and "generation 3 of 3" in chips and "finished" in chips
    assert "matmul in run seed1" in browser.find_element("id", "lineage-of").text
    islands = browser.find_elements("css selector", "#diversity .diversity[data-run='1'] tr[data-island]")
    assert len(islands) == 2 and not browser.find_elements("css selector", "#diversity .diversity[data-run='0']")
    shot(browser, "overview", "side-by-side")
    shot(browser, "progress", "side-by-side-progress")


def test_a_run_being_written_updates_without_reload(browser, runs, tmp_path):
    live, later = rewind(runs[1], tmp_path / "live", generation=1)
    later = [line for line in later if json.loads(line)["generation"] == 2]
    server = start(follow([live.root]), "127.0.0.1", 0)
    try:
        open_page(browser, server.url + "#run=0&problem=silu")
        browser.execute_script("window.__sameDocument = true")
        assert points(browser, "chart-speedup", "live") == 2
        nodes = browser.execute_script("return document.querySelectorAll('#tree g.node').length")
        assert "generation 1 of 3" in browser.find_element("id", "runs").text
        shot(browser, "progress", "live-before")

        with live.evaluations.open("a") as f:               # half a line: nothing changes, nothing breaks
            f.write(later[0][:50])
            f.flush()
            time.sleep(2.5)
            assert points(browser, "chart-speedup", "live") == 2
            assert "cannot reach" not in browser.find_element("id", "status").text
            f.write(later[0][50:] + "".join(later[1:]))
        started = time.monotonic()
        wait_for(browser, "return document.querySelectorAll(\"#chart-speedup g.series[data-series='live'] "
                          "circle.point\").length === 3", timeout_s=8, what="generation 2's point")
        seen_after = time.monotonic() - started
        assert "evaluating generation 2" in browser.find_element("id", "runs").text
        assert browser.execute_script("return document.querySelectorAll('#tree g.node').length") > nodes

        live.checkpoint_path(2).write_bytes(runs[1].checkpoint_path(2).read_bytes())
        wait_for(browser, "return document.getElementById('runs').textContent.includes('generation 2 of 3')",
                 timeout_s=8, what="the checkpoint of generation 2")
        assert browser.execute_script("return window.__sameDocument") is True       # no reload
        shot(browser, "progress", "live-after")
        assert seen_after < 6
    finally:
        server.close()
