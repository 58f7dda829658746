"""Stand-in module objects that make a dialect's `import` statements resolve to the emulator,
in the current process only. Each front-end builds its namespace (`neuronxcc.nki...` or
`nki...`) with `stand_in` and installs it with `install`; nothing of that name exists on
disk, so a host with the real SDK uses it unless the evaluating process asks for the emulator.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections.abc import Callable
from typing import Any

MARK = "__nki_emulator__"   # set on every stand-in module


def stand_in(name: str, attrs: dict[str, Any], getattr_: Callable[[str], Any], package: bool = False,
             doc: str = "") -> types.ModuleType:
    """A module named `name` holding `attrs`; other names go to `getattr_` (module __getattr__)."""
    mod = types.ModuleType(name, doc or f"NKI emulator stand-in for `{name}` (fitness.simulator).")
    # a spec (and a package path) so that importlib.util.find_spec and submodule imports work
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, origin="fitness.simulator (NKI emulator)",
                                                  is_package=package)
    if package:
        mod.__path__ = []
    mod.__dict__.update(attrs)
    setattr(mod, MARK, True)
    mod.__getattr__ = getattr_
    return mod


def install(root: str, build: Callable[[], dict[str, types.ModuleType]]) -> None:
    """Put the modules `build()` makes into sys.modules unless the emulator's `root` is there."""
    present = sys.modules.get(root)
    if present is not None and getattr(present, MARK, False):
        return
    sys.modules.update(build())


def uninstall(root: str) -> None:
    """Remove the emulator's `root` modules from sys.modules (tests)."""
    for name in [n for n in sys.modules if n == root or n.startswith(root + ".")]:
        if getattr(sys.modules[name], MARK, False):
            del sys.modules[name]
