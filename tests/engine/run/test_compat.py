"""The work-around for CPython's thread-unsafe AST construction (gh-106905)."""

import ast
import gc
import threading
import time

import pytest

from accelopt_evo.run import compat


def test_affected_versions():
    assert compat.affected((3, 11, 7)) and compat.affected((3, 12, 1)) and compat.affected((3, 11, 0))
    assert not compat.affected((3, 11, 8)) and not compat.affected((3, 12, 2)) and not compat.affected((3, 10, 14))
    assert not compat.affected((3, 13, 0))


class _Cycle:
    """Garbage in a reference cycle whose finalizer lets other threads run (as a collection in
    the middle of a parse does)."""

    def __init__(self):
        self.me = self

    def __del__(self):
        time.sleep(0)


def parse_on_threads(threads=6, rounds=20):
    source = "\n".join(f"def f{i}(x):\n    return [y for y in range(x) if y % 3 or {{y: (y, [y])}}]"
                       for i in range(150))
    errors = []

    def parse_often():
        try:
            for _ in range(rounds):
                [_Cycle() for _ in range(50)]
                ast.parse(source)
        except Exception as exc:  # noqa: BLE001 - collected for the caller
            errors.append(exc)

    saved = gc.get_threshold()
    gc.set_threshold(50, 5, 5)
    try:
        workers = [threading.Thread(target=parse_often) for _ in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    finally:
        gc.set_threshold(*saved)
    return errors


@pytest.mark.skipif(not compat.affected(), reason="this interpreter builds ASTs safely on several threads")
def test_parsing_on_many_threads_at_once_works_after_the_work_around(monkeypatch):
    monkeypatch.setattr(ast, "parse", ast.parse)   # the original is restored afterwards
    compat.serialize_ast_parse()
    compat.serialize_ast_parse()                   # idempotent
    assert getattr(ast.parse, "serialized", False)
    assert parse_on_threads() == []
