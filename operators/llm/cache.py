"""Response cache in the run folder: a repeated or resumed run gets the same replies for free.

A reply is stored under the sha256 of (model, messages, sampling parameters, sample index),
one JSON file per key in `llm_cache/<2 hex>/<key>.json`, written atomically. The sample index
tells apart identical requests that must get independent replies (several samples of one
plan, the same parent drawn twice); it is assigned in a deterministic order, never by time.
The parameters are those the request carries (client.ChatCall.params): an unset setting is
in neither the request nor the key, so the keys of a run folder of an earlier release, whose
calls always carried the temperature its config.toml records, stay what they were. Only
successful replies are stored, never one cut at its completion budget.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

CACHE_DIR = "llm_cache"


def cache_key(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any], sample: str) -> str:
    """The content address of one request."""
    blob = json.dumps({"model": model, "messages": list(messages), "params": dict(params), "sample": sample},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def prompt_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """A short hash of the messages alone (for the ledger)."""
    blob = json.dumps(list(messages), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CachedReply:
    content: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str = ""
    model: str = ""          # the model the server said it used
    role: str = ""


class ResponseCache:
    """Replies by cache key under `root`; safe to use from several threads."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> CachedReply | None:
        try:
            data = json.loads(self._path(key).read_text())
        except (OSError, json.JSONDecodeError):
            return None
        names = {f.name for f in dataclasses.fields(CachedReply)}
        try:
            return CachedReply(**{k: v for k, v in data.items() if k in names})
        except TypeError:
            return None

    def put(self, key: str, reply: CachedReply) -> None:
        """Store `reply` under `key`; a reply cut at its budget (finish_reason "length") is not
        stored, so a resumed run asks again rather than replaying a truncated answer."""
        if reply.finish_reason == "length":
            return
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(dataclasses.asdict(reply), f)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json")) if self.root.is_dir() else 0
