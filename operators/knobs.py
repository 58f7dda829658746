"""`# tune:` knobs: module-level integer constants a kernel declares as tunable.

    LOAD_N = 512  # tune: 256, 512, 1024, 2048

The offline operators move knobs between their listed values; LLM prompts ask to keep them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_KNOB = re.compile(
    r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<eq>\s*=\s*)(?P<value>-?\d+)(?P<gap>\s*)#\s*tune:\s*(?P<choices>[-\d,\s]+?)\s*$"
)


@dataclass(frozen=True)
class Knob:
    name: str
    value: int
    choices: tuple[int, ...]
    line: int  # 0-based line index in the source


def find_knobs(source: str) -> dict[str, Knob]:
    """The knobs declared at module level (unindented lines), by name."""
    knobs: dict[str, Knob] = {}
    for i, line in enumerate(source.splitlines()):
        m = _KNOB.match(line)
        if not m:
            continue
        try:
            choices = tuple(int(c) for c in m["choices"].replace(",", " ").split())
        except ValueError:
            continue
        if choices:
            knobs[m["name"]] = Knob(m["name"], int(m["value"]), choices, i)
    return knobs


def set_knobs(source: str, values: dict[str, int]) -> str:
    """`source` with the named knobs set to new values (other text unchanged)."""
    knobs = find_knobs(source)
    lines = source.splitlines(keepends=True)
    for name, value in values.items():
        knob = knobs[name]
        old = lines[knob.line]
        m = _KNOB.match(old.rstrip("\r\n"))
        assert m is not None
        ending = old[len(old.rstrip("\r\n")):]
        lines[knob.line] = old[: m.start("value")] + str(value) + old[m.end("value"): len(old) - len(ending)] + ending
    return "".join(lines)
