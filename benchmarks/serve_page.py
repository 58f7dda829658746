"""How fast `serve`'s page of a big run folder loads in a real browser.

    python benchmarks/serve_page.py [--run-dir DIR ...] [--repeat 3] [--out benchmarks/out/serve-page]
        [--screenshot FILE.png [--route 'run=0&problem=NAME'] [--width 1280 --height 900]]

The run folder (default: made once under --out, then reused) is a real run of the engine on the
14 NKIBench problems at shape tiny for 20 generations with the offline operators and the default
population (8 + 8 a generation), judged by the tests' deterministic evaluator with profiles of a
real simulator evaluation (so the files have a real run's sizes); --run-dir measures the page of
any run folders instead (several: side by side). The README's screenshot (docs/serve.png) is
--screenshot of two real runs. Each measurement starts a fresh server (which reads the whole folder on the
first request) and a headless Chromium on a fresh page, and times from navigation to the page
having drawn everything it shows at first (run chips, per-problem curves, charts, lineage tree,
memory: `data-ready`). Prints the figures; no figure is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]
sys.path.append(str(REPO / "tests"))

from accelopt_evo.report.serve.follow import follow  # noqa: E402
from accelopt_evo.report.serve.server import start  # noqa: E402
from accelopt_evo.run import config as cfgmod  # noqa: E402
from accelopt_evo.run.folder import RunFolder  # noqa: E402
from accelopt_evo.runner import start_run  # noqa: E402
from nkibench.registry import builtin_names  # noqa: E402

from browser import chromium, missing, wait_for  # noqa: E402
from fakes import KnobEvaluator  # noqa: E402

GENS = 20
# The profile of a real simulator evaluation (silu at shape tiny on trn1): the counters every
# evaluation line and checkpoint carries.
PROFILE = {
    "bottleneck": "Latency-bound (simulated trn1: dependency stalls and fixed overheads): busiest is VectorE at 6%, "
                  "then DMA 6%, ScalarE 2%",
    "dma_active_time_percent": 0.0606, "dma_bandwidth_utilization_percent": 0.0606, "estimate": "simulated",
    "gpsimd_engine_active_time_percent": 0.0, "hardware_flops": 0, "hbm_read_bytes": 262144,
    "hbm_write_bytes": 262144, "hfu_estimated_percent": 0.0, "latency_ms": 0.0363, "mm_arithmetic_intensity": 0.0,
    "peak_flops_bandwidth_ratio": 223.78, "scalar_engine_active_time_percent": 0.0229, "spill_reload_bytes": 0,
    "spill_save_bytes": 0, "target": "trn1", "tensor_engine_active_time_percent": 0.0, "transpose_flops": 0,
    "vector_engine_active_time_percent": 0.0619,
}


class ProfiledEvaluator(KnobEvaluator):
    """The tests' knob evaluator, with a real evaluation's profile on every valid result."""

    def _result(self, spec, source: str):
        result = super()._result(spec, source)
        if result.ok:
            result.profile = {**PROFILE, "latency_ms": result.latency_ms}
        return result


def make_folder(out: Path) -> RunFolder:
    """The benchmark's run folder: made once, reused while it holds generation GENS."""
    folder = RunFolder(out / "r")
    if folder.checkpoint_path(GENS).is_file():
        return folder
    if folder.root.exists():
        raise SystemExit(f"{folder.root} holds an unfinished run: delete it")
    names = builtin_names()
    cfg = cfgmod.resolve(sets=[f"run.gens={GENS}", f"run.out={json.dumps(str(out))}", "run.shape=\"tiny\"",
                               f"run.problems={json.dumps(names)}", "run.report=false"])
    started = time.perf_counter()
    print(f"making the run folder: {len(names)} problems, {GENS} generations (once) ...", flush=True)
    start_run(cfg, "r", progress=False, log=lambda _msg: None,
              evaluator_factory=lambda _cfg, _folder: ProfiledEvaluator(backend="simulator", failures=True))
    print(f"  made in {time.perf_counter() - started:.0f} s", flush=True)
    return folder


def describe(folder: RunFolder) -> str:
    lines = folder.evaluations.read_text().count("\n")
    size = sum(p.stat().st_size for p in folder.root.rglob("*") if p.is_file())
    gens = folder.checkpoint_files()
    newest = gens[-1][1].stat().st_size if gens else 0
    problems = {json.loads(line)["problem"] for line in folder.evaluations.read_text().splitlines()}
    return (f"{len(problems)} problems, {gens[-1][0] if gens else -1} generations, {lines} evaluation lines, "
            f"{len(list(folder.kernels.iterdir()))} kernels, {size / 1e6:.1f} MB in all, newest checkpoint "
            f"{newest / 1e6:.1f} MB")


def load_page(driver, url: str) -> float:
    """Seconds from navigation to the page having drawn everything it shows at first."""
    driver.get("about:blank")
    driver.get(url)
    wait_for(driver, "return document.body.dataset.ready === '1'", timeout_s=60, what="the page drawn")
    return int(driver.execute_script("return document.body.dataset.readyMs")) / 1000


def api_seconds(url: str, problem: str) -> float:
    """The same first requests without a browser (what a fresh server answers)."""
    started = time.perf_counter()
    for path in ("api/runs", "api/run/0/summary", "api/run/0/memory", f"api/run/0/tree?problem={problem}"):
        with urllib.request.urlopen(url + path) as response:
            response.read()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", nargs="+", help="measure the page of these run folders instead of its own")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "serve-page"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--screenshot", metavar="FILE.png", help="also save a screenshot of the page")
    parser.add_argument("--route", default="", help="the page's view for the screenshot, e.g. 'run=0&problem=silu'")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args()

    folders = [RunFolder.open(d) for d in args.run_dir] if args.run_dir else [make_folder(Path(args.out))]
    for folder in folders:
        print(f"run folder: {folder.root} ({describe(folder)})")
    roots = [f.root for f in folders]
    problem = json.loads(folders[0].evaluations.read_text().splitlines()[0])["problem"]
    api = []
    for _ in range(args.repeat):
        server = start(follow(roots), "127.0.0.1", 0)
        try:
            api.append(api_seconds(server.url, problem))
        finally:
            server.close()
    print(f"API, fresh server (folder read whole, then summary, memory, tree): median "
          f"{statistics.median(api):.3f} s, max {max(api):.3f} s over {len(api)}")
    why = missing()
    if why:
        print(f"no browser to time the page: {why}")
        return 1
    cold, warm = [], []
    with chromium(args.width, args.height) as driver:
        for _ in range(args.repeat):
            server = start(follow(roots), "127.0.0.1", 0)
            try:
                cold.append(load_page(driver, server.url))
                warm.append(load_page(driver, server.url))
            finally:
                server.close()
        if args.screenshot:
            server = start(follow(roots), "127.0.0.1", 0)
            try:
                load_page(driver, server.url + "#" + args.route)
                time.sleep(0.5)
                driver.save_screenshot(args.screenshot)
            finally:
                server.close()
    print(f"page load, fresh server (navigation -> everything drawn): median {statistics.median(cold):.3f} s, "
          f"max {max(cold):.3f} s over {len(cold)}")
    print(f"page load, server already following the folder: median {statistics.median(warm):.3f} s, "
          f"max {max(warm):.3f} s over {len(warm)}")
    if args.screenshot:
        print(f"screenshot: {args.screenshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
