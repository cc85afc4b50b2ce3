"""Saved crashers: tests/regressions/crashers/<digest>.tile (the input, byte-exact) + <digest>.json.

The JSON sidecar records how the input crashed when it was found:
    signature    the de-duplication key (harness.Outcome.signature)
    kind         the crash kind
    via          "api" (compiler.driver.compile_source) or "cli" (compiler.cli.main on the file)
    overrides    (optional) keyword arguments of compile_source it crashed with (arch, ptx_version, options)
    detail       the first lines of what went wrong
    known_issue  null, or why it still crashes (owner and what must change); the regression test marks
                 such inputs xfail(strict=True), so fixing the bug turns them into a failure that asks
                 for the note to be removed
An existing sidecar is never overwritten (it may carry a hand-written known_issue).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .harness import Outcome, input_digest

CRASHER_DIR = Path(__file__).resolve().parent.parent / "regressions" / "crashers"


@dataclass(frozen=True)
class Crasher:
    path: Path
    data: bytes
    meta: dict

    @property
    def text(self) -> str | None:
        """The input as text, or None when it is not valid UTF-8 (a CLI-only crasher)."""
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError:
            return None


def save_crasher(data: str | bytes, outcome: Outcome, via: str, overrides: dict | None = None,
                 directory: Path = CRASHER_DIR) -> Path:
    """Save one crasher; if one with the same signature is saved already, return that one instead."""
    for saved in load_crashers(directory):
        if saved.meta["signature"] == outcome.signature:
            return saved.path
    raw = data.encode("utf-8") if isinstance(data, str) else data
    directory.mkdir(parents=True, exist_ok=True)
    digest = input_digest(raw)
    path = directory / f"{digest}.tile"
    if not path.exists():
        path.write_bytes(raw)
    meta_path = path.with_suffix(".json")
    if not meta_path.exists():
        meta = {"signature": outcome.signature, "kind": outcome.kind, "via": "api" if via.startswith("api") else via,
                "detail": "\n".join(outcome.detail.splitlines()[-12:]), "known_issue": None}
        if overrides:
            meta["overrides"] = {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items()}
        meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load_crashers(directory: Path = CRASHER_DIR) -> list[Crasher]:
    out = []
    for meta_path in sorted(directory.glob("*.json")):
        tile = meta_path.with_suffix(".tile")
        if tile.exists():
            out.append(Crasher(tile, tile.read_bytes(), json.loads(meta_path.read_text(encoding="utf-8"))))
    return out


def known_signatures(directory: Path = CRASHER_DIR) -> dict[str, str]:
    """Signatures of saved crashers that still carry a known_issue note, with the note."""
    return {c.meta["signature"]: c.meta["known_issue"] for c in load_crashers(directory) if c.meta.get("known_issue")}
