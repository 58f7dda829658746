"""Getting a kernel (or plain text) out of an LLM reply.

Replies come in every shape: one fenced block with or without a language tag, several blocks
(an explanation snippet, then the kernel; or constants and kernel split apart), an unclosed
fence, no fence at all with prose before and after the code, reasoning wrapped in
<think>...</think>. The kernel is the last block that parses as Python and defines `kernel`,
joined with earlier blocks that define names it uses; missing standard NKI imports are added,
in the dialect the reply imports, else in the dialect of the kernel it was asked to change (so
that a reply is never turned into a file importing both dialects).
No usable code gives None, never an exception.
"""

from __future__ import annotations

import ast
import builtins
import re
import threading
from dataclasses import dataclass

THINK_RE = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
UNCLOSED_THINK_RE = re.compile(r"^.*?</(think|thinking|reasoning)>", re.S | re.I)
FENCE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.S | re.M)
CODE_START_RE = re.compile(r"^(import |from |@nki\.jit|@jit|def kernel\b|[A-Z][A-Z0-9_]*\s*=)")
NON_PYTHON_TAGS = {"text", "txt", "bash", "sh", "shell", "console", "json", "yaml", "toml", "diff", "markdown",
                   "md", "c", "cpp", "cuda"}

# The import line of each conventional alias, per NKI dialect (legacy `neuronxcc.nki`, current
# `nki`); which dialect a source is written in, its imports say (top-level package -> dialect).
STANDARD_IMPORTS = {
    "legacy": {"np": "import numpy as np", "nki": "import neuronxcc.nki as nki",
               "nl": "import neuronxcc.nki.language as nl", "nisa": "import neuronxcc.nki.isa as nisa"},
    "current": {"np": "import numpy as np", "nki": "import nki",
                "nl": "import nki.language as nl", "nisa": "import nki.isa as nisa"},
}
DIALECT_OF_PACKAGE = {"neuronxcc": "legacy", "nki": "current"}


# CPython 3.11's ast.parse is not safe to call from several threads at once (it can fail with
# "AST constructor recursion depth mismatch"); replies are parsed in the LLM call threads.
_AST_LOCK = threading.Lock()


def _parse(source: str) -> ast.Module:
    with _AST_LOCK:
        return ast.parse(source)


@dataclass(frozen=True)
class Extraction:
    source: str
    how: str        # "fenced", "fenced-joined", "unfenced"


def strip_reasoning(text: str) -> str:
    """The reply without reasoning blocks (also a leading block whose opening tag was cut off)."""
    text = THINK_RE.sub("", text)
    if re.search(r"</(think|thinking|reasoning)>", text, re.I):
        text = UNCLOSED_THINK_RE.sub("", text, count=1)
    return text.strip()


def _defines_kernel(source: str) -> bool:
    try:
        tree = _parse(source)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(n, ast.FunctionDef) and n.name == "kernel" for n in tree.body)


def _parses(source: str) -> bool:
    try:
        _parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every fenced block, in order; an unclosed last fence runs to
    the end of the text."""
    return [(m.group(2).lower(), m.group(3)) for m in FENCE_RE.finditer(text)]


def _bound(source: str) -> set[str]:
    """Names a piece of code binds anywhere (assignments, definitions, imports, arguments)."""
    try:
        tree = _parse(source)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _unbound(source: str) -> set[str]:
    """Names a piece of code reads but never binds (builtins and NKI aliases aside)."""
    try:
        tree = _parse(source)
    except (SyntaxError, ValueError):
        return set()
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return read - _bound(source) - set(dir(builtins)) - set(STANDARD_IMPORTS["legacy"])


def dialect_of(source: str, default: str = "legacy") -> str:
    """The NKI dialect whose modules `source` imports; `default` when it imports none or both."""
    try:
        tree = _parse(source)
    except (SyntaxError, ValueError):
        return default
    found = {DIALECT_OF_PACKAGE.get(name.split(".")[0]) for name in _imported_modules(tree)} - {None}
    return found.pop() if len(found) == 1 else default


def _imported_modules(tree: ast.AST) -> list[str]:
    modules: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules.append(node.module)
    return modules


def _with_imports(source: str, dialect: str) -> str:
    """Prepend the standard import of every NKI alias the code uses but does not import, in the
    dialect the code imports already (`dialect` when it imports none)."""
    try:
        tree = _parse(source)
    except SyntaxError:
        return source
    bound: set[str] = set()
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.Name):
            used.add(node.id)
    lines = STANDARD_IMPORTS[dialect_of(source, dialect)]
    missing = [line for alias, line in lines.items() if alias in used and alias not in bound]
    return ("\n".join(missing) + "\n\n" + source) if missing else source


def _unfenced(text: str) -> str | None:
    """The longest stretch of lines, from the first code-like line, that parses and defines
    `kernel` (prose after the code is dropped)."""
    lines = text.splitlines()
    defs = [i for i, line in enumerate(lines) if line.startswith("def kernel")]
    if not defs:
        return None
    starts = [i for i, line in enumerate(lines[: defs[-1] + 1]) if CODE_START_RE.match(line)]
    for start in starts[:5]:
        first_def = next(d for d in defs if d >= start)
        for end in range(len(lines), first_def, -1):
            chunk = "\n".join(lines[start:end]).strip()
            if _defines_kernel(chunk):
                return chunk
    return None


def extract_kernel(reply: str, dialect: str = "legacy") -> Extraction | None:
    """The kernel source in a reply, or None when the reply has no usable kernel; `dialect` is
    that of the kernel the reply changes (for the imports a reply leaves out)."""
    text = strip_reasoning(reply or "")
    if not text:
        return None
    blocks = [body for tag, body in fenced_blocks(text) if tag not in NON_PYTHON_TAGS]
    for k in range(len(blocks) - 1, -1, -1):
        body = blocks[k]
        if "def kernel" in body and _defines_kernel(body):
            # Constants or helpers the kernel uses may sit in earlier blocks of the reply.
            missing = _unbound(body)
            extra = [b.strip() for b in blocks[:k] if missing & _bound(b)]
            if extra:
                joined = "\n\n".join(extra + [body.strip()])
                if _parses(joined):
                    return Extraction(_with_imports(joined, dialect) + "\n", "fenced-joined")
            return Extraction(_with_imports(body.strip(), dialect) + "\n", "fenced")
    found = _unfenced(text)
    if found is not None:
        return Extraction(_with_imports(found, dialect) + "\n", "unfenced")
    return None


def extract_text(reply: str, max_chars: int = 4000) -> str:
    """A prose reply (a plan, a rationale) without reasoning blocks, trimmed to max_chars."""
    text = strip_reasoning(reply or "")
    if len(text) > max_chars:
        text = text[:max_chars].rstrip() + " ..."
    return text
