"""Keyed digests (seals) of what the tool writes and later reads back.

A run folder or an evaluation cache may come from someone else: a teammate's shared
`evaluation.cache_dir`, a downloaded run folder. What is read back from them must not hand out
a fitness, so the checkpoints and cache entries this tool writes carry an HMAC-SHA256 of their
content under a secret key: the user's own (created on first use, mode 0600, in the user's
configuration folder, `user_key_path`), or a key file a team shares for a shared cache folder
(`evaluation.cache_key_file`). A record whose seal does not verify under the reader's key was
written elsewhere or edited since; its readers recompute it instead of trusting it.

Kernel processes never see the key: it lies outside everything the sandbox lets them read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KEY_FILE = "secret.key"
KEY_BYTES = 32


class SealError(RuntimeError):
    """A key file that cannot be created or read: one line naming it."""


def user_key_path() -> Path:
    """The user's key file: `$XDG_CONFIG_HOME/accelopt-evo/secret.key`, by default under
    `~/.config`."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "accelopt-evo" / KEY_FILE


def _create(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:   # another process was faster
        return
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(KEY_BYTES) + "\n")


def read_key(path: Path, create: bool = False) -> bytes:
    """The key in `path` (created first, 0600, when `create` and missing)."""
    try:
        if create and not path.exists():
            _create(path)
        text = path.read_text().strip()
    except OSError as exc:
        raise SealError(f"key file '{path}': {exc.strerror or exc}") from None
    if len(text) < 32:
        raise SealError(f"key file '{path}' holds no key (at least 32 characters expected)")
    return text.encode()


def canonical(payload: Any) -> bytes:
    """The bytes a seal covers: the payload's JSON with sorted keys and no whitespace (what a
    reader gets back from the file it parsed, whatever the file's own layout)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Seal:
    """Seals payloads under one key; `name` says whose key (for messages)."""

    key: bytes = field(repr=False)
    name: str = "your key"

    def digest(self, payload: Any) -> str:
        return hmac.new(self.key, canonical(payload), hashlib.sha256).hexdigest()

    @property
    def fingerprint(self) -> str:
        """A short name of the key that does not reveal it: folders kept per key (reference
        data) are named by it, so that two keys sharing a cache folder never replace each
        other's files."""
        return self.digest("accelopt-evo key fingerprint")[:12]

    def verifies(self, payload: Any, digest: Any) -> bool:
        return isinstance(digest, str) and hmac.compare_digest(self.digest(payload), digest)


def user_seal() -> Seal:
    """The seal of the user's own key (created on first use)."""
    return Seal(read_key(user_key_path(), create=True), "your key")


def seal_for(key_file: str = "") -> Seal:
    """The seal of `key_file` (a team's shared key; never created here), or the user's own."""
    if key_file:
        path = Path(key_file).expanduser()
        return Seal(read_key(path), f"the key in {path}")
    return user_seal()


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
