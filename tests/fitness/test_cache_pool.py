"""The evaluation cache (keys, folders, what is stored) and the pool (bounds, in-flight sharing)."""

from __future__ import annotations

import threading
import time

import pytest

from fitness.cache import CacheFolder, EvalCache, cache_key, evaluator_version
from fitness.pool import EvalPool
from fitness.result import EvalResult
from fitness.seal import Seal
from nkibench.problem import ProblemSpec

SPEC = ProblemSpec.make("silu", {"M": 128, "N": 512})
SRC = "import numpy as np\n\ndef kernel(x):\n    return x\n"
GATE = [[0, 21], [99], 0.0]


SEAL = Seal(b"a test key of at least 32 characters")


def cache(*paths) -> EvalCache:
    """A cache over `paths`, every folder sealed with the test key."""
    return EvalCache([CacheFolder(p, SEAL) for p in paths])


def key(source=SRC, spec=SPEC, backend="simulator", target="trn1", gate=GATE, version="v1"):
    return cache_key(source, spec, backend, target, gate, version)


def test_key_ignores_formatting_but_not_what_decides_a_result():
    # within a line, and after the last: the lines of the code are part of what decides a price
    assert key() == key("import numpy as np\n\ndef kernel(x):  # comment\n    return (x)\n# the end\n")
    assert key() != key("import numpy as np\n# a comment that moves the kernel a line down\n\ndef kernel(x):\n    return x\n")
    others = [key(SRC.replace("return x", "return x + 0")), key(spec=ProblemSpec.make("silu", {"M": 256, "N": 512})),
              key(backend="trainium"), key(target="trn2"), key(gate=[[0], [99], 0.0]), key(gate=[[0, 21], [98], 0.0]),
              key(gate=[[0, 21], [99], 1e-3]), key(version="v2")]
    assert len({key(), *others}) == len(others) + 1


def test_version_includes_a_digest_of_the_sources():
    v = evaluator_version()
    assert v.count("-") == 1 and len(v.split("-")[1]) == 16


def test_results_round_trip_through_run_and_shared_folders(tmp_path):
    run, shared = tmp_path / "run", tmp_path / "shared"
    ok = EvalResult("ok", latency_ms=1.5, profile={"hbm_read_bytes": 3}, kernel_id="k", problem="p",
                    backend="simulator", target="trn1", seconds=2.0)
    cache(run, shared).put("ab" * 32, ok)
    hit = cache(tmp_path / "other-run", shared).get("ab" * 32)
    assert hit.cached and hit.latency_ms == 1.5 and hit.profile == {"hbm_read_bytes": 3}
    assert (tmp_path / "other-run" / "ab" / f"{'ab' * 32}.json").is_file()   # copied into the run's own cache
    assert cache(run).get("cd" * 32) is None


@pytest.mark.parametrize("status", ["timeout", "memory_exceeded", "crashed"])
def test_limit_dependent_outcomes_are_not_stored(tmp_path, status):
    store = cache(tmp_path)
    store.put("ef" * 32, EvalResult(status, error="x"))
    assert store.get("ef" * 32) is None and not list(tmp_path.rglob("*.json"))


def test_a_corrupt_entry_is_a_miss(tmp_path):
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / f"{'ab' * 32}.json").write_text("{not json")
    assert cache(tmp_path).get("ab" * 32) is None


def test_an_unwritable_shared_folder_does_not_stop_a_run(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder should be")
    store = cache(tmp_path / "run", blocked)
    store.put("ab" * 32, EvalResult("rejected", error="policy"))
    assert cache(tmp_path / "run").get("ab" * 32).status == "rejected"


def test_pool_bounds_concurrency_and_shares_in_flight_work():
    pool = EvalPool(2)
    running, peak, calls = [0], [0], []
    lock = threading.Lock()

    def work(name):
        def run():
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
                calls.append(name)
            time.sleep(0.2)
            with lock:
                running[0] -= 1
            return name
        return run

    futures = [pool.submit("a", work("a")), pool.submit("a", work("a-again")), pool.submit("b", work("b")),
               pool.submit("c", work("c")), pool.submit("d", work("d"))]
    assert futures[0] is futures[1]
    done = [f.result() for f in pool.completed(futures[1:], progress="unit test")]
    pool.close()
    assert sorted(done) == ["a", "b", "c", "d"] and "a-again" not in calls and peak[0] == 2


def test_pool_goes_on_after_a_failing_task():
    pool = EvalPool(1)

    def boom():
        raise RuntimeError("worker bug")

    bad, good = pool.submit("x", boom), pool.submit("y", lambda: 42)
    assert good.result(timeout=5) == 42
    with pytest.raises(RuntimeError):
        bad.result()
    assert pool.submit("x", lambda: "retried").result(timeout=5) == "retried"   # not stuck in flight
    pool.close()
