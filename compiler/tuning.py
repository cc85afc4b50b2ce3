"""Tuning files: what `tilec tune` writes (compiler/tune.py) and `tilec compile --tuning FILE` applies.

A tuned schedule is used only when asked for: compile output depends on its inputs alone (the .tile, and the
tuning file when one is given). The file records, per tile, the key it was tuned for and the chosen
`schedule`; compile refuses a file whose key does not match the tile it would change:
  name        the tile's name
  target      the target the tile compiles for (the file's `target`, or --arch)
  tile_shape  the tile's instruction shape (`shape M=.. N=.. K=..`)
  digest      SHA-256 of the tile as the spec printer writes it without its `schedule` statement (so a
              change to its types, sparsity or epilogue, which change the legal schedules, is noticed;
              formatting and comments are not part of it, nor the schedule that tuning rewrites)

Applying a tuning replaces the tile's `schedule` statement in the source text (the same edit `tilec tune
--write` makes) before compiling, so `compile --tuning T X.tile` and compiling the rewritten X.tile give
the same PTX.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

from .diagnostics import CompileError, Diagnostic, Loc

FORMAT = "tilec-tuning"
FORMAT_VERSION = 1


def tile_key(target: str, tile) -> dict[str, Any]:
    """The key of a TileSpec (module docstring)."""
    from .spec_printer import print_tile

    text = print_tile(replace(tile, schedule=None))
    return {"target": target, "tile_shape": [tile.m, tile.n, tile.k],
            "digest": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def _offset(text: str, line: int, col: int) -> int:
    """Character offset of the 1-based (line, col) of a Loc in `text`."""
    at = 0
    for _ in range(line - 1):
        at = text.index("\n", at) + 1
    return at + col - 1


def schedule_span(text: str, tile) -> tuple[int, int] | None:
    """[start, end) of the tile's `schedule ... ;` statement in `text` (None: the tile has none). The
    statement's arguments are atoms; comments (// and #, to the end of the line) may sit between them."""
    loc = tile.locs.get("schedule")
    if loc is None or tile.schedule is None:
        return None
    start = at = _offset(text, loc.line, loc.col)
    while True:
        ch = text[at]
        if ch == ";":
            return start, at + 1
        if ch == "#" or text.startswith("//", at):
            at = text.index("\n", at)
        at += 1


def with_schedule(text: str, tile, schedule) -> str:
    """`text` with the tile's `schedule` statement replaced by `schedule` (a ScheduleSpec); every other
    byte kept."""
    from .spec_printer import schedule_statement

    span = schedule_span(text, tile)
    if span is None:
        raise ValueError(f"tile '{tile.name}' has no schedule statement")
    return text[:span[0]] + schedule_statement(schedule) + text[span[1]:]


def parse_schedule_words(words: str, target: str, where: str):
    """The ScheduleSpec of `schedule WORDS;`, read by the DSL front end (a tiny tile around it). A bad
    statement raises ValueError with the front end's message."""
    from .frontend.build import parse_spec

    if not isinstance(words, str) or any(c in words for c in ";{}\n#/"):
        raise ValueError(f"{where}: not the words of a schedule statement: {words!r}")
    text = f"target {target};\ntile t {{ engine mma.sp; shape M=16 N=8 K=32; schedule {words}; }}\n"
    try:
        spec = parse_spec(text, "<tuning>", None)
    except CompileError as e:
        raise ValueError(f"{where}: schedule '{words}': {e.diagnostics[0].message}") from None
    return spec.tiles[0].schedule


def read_tuning(path: str) -> dict[str, Any]:
    """The tuning file at `path`, checked for its shape. Bad JSON is located (`path:line:col: error`)."""
    from .files import file_error
    from .frontend.source import read_source

    try:
        text, name = read_source(path, stdin_dash=False)
    except OSError as e:
        raise file_error("read", path, e) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise CompileError([Diagnostic(f"not a tuning file: {e.msg}", Loc(name, e.lineno, e.colno),
                                       "give the JSON file `tilec tune --out` wrote")], text) from None
    problem = _shape_problem(doc)
    if problem:
        raise CompileError([Diagnostic(f"{name}: not a tuning file: {problem}",
                                       hint="give the JSON file `tilec tune --out` wrote")])
    return doc


def _shape_problem(doc: Any) -> str | None:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return f"no \"format\": \"{FORMAT}\""
    if doc.get("format_version") != FORMAT_VERSION:
        return f"format_version {doc.get('format_version')!r} (this tilec reads {FORMAT_VERSION})"
    tiles = doc.get("tiles")
    if not isinstance(tiles, dict) or not tiles:
        return "no \"tiles\""
    for name, rec in tiles.items():
        if not isinstance(rec, dict) or not isinstance(rec.get("key"), dict) or \
                not isinstance(rec.get("chosen"), (str, type(None))):
            return f"tile '{name}' has no \"key\" object and \"chosen\" schedule"
    return None


def apply_tuning(text: str, spec, doc: dict[str, Any], tuning_name: str) -> str:
    """`text` (the DSL source of `spec`, a FileSpec) with the schedule `doc` chose for each of its tiles.
    Every tile the file records must be in `spec` with the same key; anything else is a CompileError
    located at the tile (or the target) that differs."""
    tiles = {t.name: t for t in spec.tiles}
    edits = []
    for name, rec in sorted(doc["tiles"].items()):
        tile = tiles.get(name)
        if tile is None:
            raise CompileError([Diagnostic(
                f"{tuning_name} was tuned for tile '{name}', which {spec.filename} does not have "
                f"(tiles: {', '.join(tiles)})", None, "tune this file: tilec tune FILE --shape M,N,K")], text)
        key, want = tile_key(spec.target, tile), rec["key"]
        for field, what, loc in (("target", "target", spec.locs.get("target") or tile.locs.get("tile")),
                                 ("tile_shape", "instruction shape", tile.locs.get("shape")),
                                 ("digest", "tile (its statements other than `schedule`)", tile.locs.get("tile"))):
            if want.get(field) != key[field]:
                shown = f" {want.get(field)}, not {key[field]}" if field != "digest" else ""
                raise CompileError([Diagnostic(
                    f"{tuning_name} does not match tile '{name}': it was tuned for another {what}{shown}",
                    loc, "re-run `tilec tune` on this file (a tuning applies only to the tile it was made for)")],
                    text)
        if rec["chosen"] is None:
            continue
        if tile.schedule is None:
            raise CompileError([Diagnostic(f"tile '{name}' has no `schedule` statement for {tuning_name}'s "
                                           "schedule to replace", tile.locs.get("tile"))], text)
        try:
            schedule = parse_schedule_words(rec["chosen"], spec.target, f"{tuning_name}, tile '{name}'")
        except ValueError as e:
            raise CompileError([Diagnostic(str(e))]) from None
        edits.append((tile, schedule))
    # replace from the end of the text, so that earlier statements keep their offsets
    for tile, schedule in sorted(edits, key=lambda e: schedule_span(text, e[0])[0], reverse=True):
        text = with_schedule(text, tile, schedule)
    return text
