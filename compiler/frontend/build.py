"""Syntax tree -> `FileSpec`: vocabulary checks with located diagnostics.

This layer knows the words of the DSL (which statements exist, which keys each takes, which names are
element types, spaces, majors, swizzles) and reports misspellings at the exact token with a
"did you mean" hint. Whether a combination is *legal* (M=96, N=260, a type for a kind, a selector for
a shape) is the `verify` pass's job, driven by the PTX tables.
"""
from __future__ import annotations


from ..diagnostics import ECHO_CHARS, CompileError, Diagnostic, Loc, echo
from ..spec import (EPILOGUE_ACCS, EPILOGUE_ACTS, EPILOGUE_BIAS, EPILOGUE_BIAS_TYPES, EPILOGUE_PARAM, METADATA_SOURCES, OPERAND_NAMES,
                    SCHEDULE_MMAS, SCHEDULE_PERSISTENT, SPACES, SPLIT_K_STREAM, SWIZZLES, EpilogueSpec, FileSpec,
                    OperandSpec, ScheduleSpec, SparsitySpec, TileSpec, ZeroColumnsSpec)
from ..isa.swizzle import MAJORS
from ..isa.targets import TARGETS, parse_version, version_problem
from ..isa.types import TYPES
from .parser import MAX_LIST_ITEMS, Arg, FileNode, Statement, Value, parse

ENGINES = ("tcgen05", "mma.sp", "mma")
# ---- limits (README "Limits"); the syntax's own (list length and depth, word length) are in parser.py ----
# Integer lists name TMEM lanes or D columns (at most 256): after `a..b` ranges are expanded a list has
# at most MAX_LIST_ITEMS (parser.py) items; a longer range is a typo, and expanding it (0..10**12) would
# exhaust memory before any check ran.
# Every integer the DSL reads fits 64 bits: the widest PTX integer types are .u64/.s64/.b64, and no
# field of a tile holds more (descriptors and masks are 64-bit). The verifier checks each value
# against the PTX type it lands in; this bound keeps huge literals from reaching it.
MAX_INT = 2**64 - 1
# Tiles per file: each becomes a kernel; 4096 of them compile in a few seconds (benchmarks/
# compile_speed.py measures over a thousand tiles per second) into a PTX file of several hundred
# thousand lines. A longer file is almost certainly a generator gone wrong.
MAX_TILES = 4096
# A tile name is the kernel's .entry name and the stem of the symbols tilec derives from it
# (NAME_smem, NAME_tmem_slot, tilec_NAME...): 256 characters keep every one of them far inside the
# 1024 characters the PTX ISA (4.4, Identifiers) asks every PTX implementation to support.
MAX_NAME_CHARS = 256
# Diagnostics reported per file; after this many the rest of the file is not checked (C compilers
# stop after 20 or so: a file with hundreds of errors is the wrong file, or one error repeated).
MAX_ERRORS = 100
BLOCK_SCALE_VECS = {"16": "block16", "32": "block32", "1X": "scale_vec::1X", "2X": "scale_vec::2X",
                    "4X": "scale_vec::4X", "block16": "block16", "block32": "block32"}


class _Fail(Exception):
    pass


def _did_you_mean(word: str, choices) -> str | None:
    import difflib   # only on the error path: not a start-up cost

    # difflib is quadratic in the word's length; no choice is longer than 32 characters
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5) if len(word) <= 64 else []
    listing = ", ".join(choices) if len(choices) <= 16 else ", ".join(list(choices)[:16]) + ", ..."
    if close:
        return f"did you mean '{close[0]}'? (one of: {listing})"
    return f"expected one of: {listing}"


class Builder:
    def __init__(self, filename: str, source: str):
        self.filename = filename
        self.source = source
        self.diags: list[Diagnostic] = []

    # -- reporting -------------------------------------------------------------------------------
    def error(self, message: str, loc: Loc | None, hint: str | None = None):
        self.diags.append(Diagnostic(message, loc, hint))
        raise _Fail

    def too_many_errors(self) -> bool:
        """True once MAX_ERRORS diagnostics are reported (the last one then says the rest was skipped)."""
        if len(self.diags) < MAX_ERRORS:
            return False
        note = f"stopped after {MAX_ERRORS} errors; the rest of the file was not checked"
        if note not in self.diags[-1].notes:
            self.diags[-1].notes.append(note)
        return True

    def int_literal(self, text: str, loc: Loc, what: str, base: int = 10) -> int:
        """int(text, base), which must be at most MAX_INT."""
        digits = text.lstrip("0")
        # 2**64 - 1 has 20 decimal, 16 hex, 64 binary digits: a longer literal is too large, and is
        # refused before int() converts it (Python refuses to convert more than 4300 digits).
        if len(digits) > {10: 20, 16: 16, 2: 64}[base] or int(text, base) > MAX_INT:
            self.error(f"{what} {echo(text)} is too large: integers are at most 2**64 - 1 ({MAX_INT})", loc,
                       "the widest PTX integer types are 64-bit (.u64, .s64, .b64)")
        return int(text, base)

    # -- value parsers ---------------------------------------------------------------------------
    def int_value(self, v: Value, what: str) -> int:
        if v.kind == "atom":
            t = v.text.lower()
            if t.startswith("0x") and t[2:] and all(ch in "0123456789abcdef" for ch in t[2:]):
                return self.int_literal(t[2:], v.loc, what, 16)
            if t.startswith("0b") and t[2:] and all(ch in "01" for ch in t[2:]):
                return self.int_literal(t[2:], v.loc, what, 2)
            if t.isdigit():
                return self.int_literal(t, v.loc, what)
        self.error(f"{what} must be an integer, found '{echo(v.text) or '[...]'}'", v.loc)

    def word(self, v: Value, what: str, choices) -> str:
        if v.kind in ("atom", "ratio") and v.text in choices:
            return v.text
        shown = v.text if v.kind != "list" else "[...]"
        self.error(f"unknown {what} '{echo(shown)}'", v.loc, _did_you_mean(shown, choices))

    def int_list(self, v: Value, what: str) -> tuple[int, ...]:
        """A list of integers; `a..b` inside a list is an inclusive range."""
        if v.kind != "list":
            self.error(f"{what} must be a list such as [0, 4..7]", v.loc)
        out: list[int] = []
        for item in v.items:
            if item.kind == "atom" and ".." in item.text:
                lo, _, hi = item.text.partition("..")
                a = self.int_value(Value("atom", lo, item.loc), what)
                b = self.int_value(Value("atom", hi, item.loc), what)
                if b < a:
                    self.error(f"empty range '{echo(item.text)}' in {what}", item.loc)
                if len(out) + b - a + 1 > MAX_LIST_ITEMS:
                    self.error(f"range '{echo(item.text)}' makes {what} longer than {MAX_LIST_ITEMS} items", item.loc,
                               "lists name lanes or columns (at most a few hundred)")
                out.extend(range(a, b + 1))
            else:
                out.append(self.int_value(item, what))
        return tuple(out)

    # -- statements ------------------------------------------------------------------------------
    def split_args(self, st: Statement, keys: dict, flags=(), max_bare=0):
        """Check a statement's args against its schema; returns (bare values, {key: Arg})."""
        bare, kv = [], {}
        for a in st.args:
            if a.key is None:
                if a.value.kind == "atom" and a.value.text in flags:
                    kv[a.value.text] = a
                    continue
                if len(bare) >= max_bare:
                    extra = f"; flags: {', '.join(flags)}" if flags else ""
                    if keys:
                        self.error(f"unexpected '{echo(a.value.text) or '[...]'}' in '{echo(st.head)}'", a.value.loc,
                                   f"'{echo(st.head)}' takes {', '.join(k + '=' for k in keys)}{extra}")
                    self.error(f"unexpected '{echo(a.value.text) or '[...]'}' in '{echo(st.head)}'", a.value.loc,
                               f"'{echo(st.head)}' takes {max_bare} value(s){extra}")
                bare.append(a.value)
            else:
                if a.key not in keys:
                    self.error(f"unknown key '{echo(a.key)}' in '{echo(st.head)}'", a.key_loc,
                               _did_you_mean(a.key, list(keys)))
                if a.key in kv:
                    self.error(f"'{a.key}' given twice in '{st.head}'", a.key_loc)
                kv[a.key] = a
        return bare, kv

    def build(self, node: FileNode, arch: str | None = None) -> FileSpec:
        target = None
        ptx = None
        locs: dict[str, Loc] = {}
        for st in node.statements:
            if self.too_many_errors():
                break
            try:
                if st.kind != "keyword" or st.head not in ("target", "ptx"):
                    self.error(f"unexpected statement '{echo(st.head)}' outside a tile", st.loc,
                               "at file level only 'target NAME;', 'ptx X.Y;' and 'tile NAME { ... }' are allowed")
                bare, _ = self.split_args(st, {}, max_bare=1)
                if not bare:
                    self.error(f"'{st.head}' needs a value", st.end_loc)
                v = bare[0]
                if st.head == "target":
                    if target is not None:
                        self.error("target given twice", st.loc)
                    target = self.word(v, "target", list(TARGETS))
                    locs["target"] = v.loc
                else:
                    if ptx is not None:
                        self.error("ptx version given twice", st.loc, f"first given at {locs['ptx']}")
                    ver = parse_version(v.text) if v.kind == "atom" else None
                    if ver is None:
                        message, hint = version_problem(v.text)
                        self.error(message, v.loc, hint)
                    ptx = ver
                    locs["ptx"] = v.loc
            except _Fail:
                pass
        tiles = []
        names: dict[str, Loc] = {}
        if len(node.tiles) > MAX_TILES:
            self.diags.append(Diagnostic(f"file has {len(node.tiles):,} tiles; at most {MAX_TILES} are allowed",
                                         node.tiles[MAX_TILES].loc,
                                         "each tile becomes a kernel; split the file (each tile compiles on its own)"))
            node = FileNode(node.statements, [])
        for tn in node.tiles:
            if self.too_many_errors():
                break
            if len(tn.name) > MAX_NAME_CHARS:
                self.diags.append(Diagnostic(f"tile name '{tn.name[:ECHO_CHARS]}...' is {len(tn.name):,} characters "
                                             f"long; at most {MAX_NAME_CHARS} are allowed",
                                             tn.name_loc, f"the name becomes the kernel's .entry name and the stem of "
                                             f"its other symbols; use at most {MAX_NAME_CHARS} characters"))
                continue
            if tn.name in names:
                self.diags.append(Diagnostic(f"tile '{tn.name}' is defined twice", tn.name_loc,
                                             f"first defined at {names[tn.name]}"))
                continue
            names[tn.name] = tn.name_loc
            t = self.build_tile(tn)
            if t is not None:
                tiles.append(t)
        if arch is not None:  # --arch overrides the file's target: its statement is not to blame
            target = arch
            locs.pop("target", None)
        for t in tiles:      # so that checks on one tile can blame the file's target / ptx statements
            for key in ("target", "ptx"):
                if key in locs:
                    t.locs.setdefault(key, locs[key])
        if target is None and not self.diags:
            self.diags.append(Diagnostic("missing 'target' statement", Loc(self.filename, 1, 1),
                                         "start the file with e.g. 'target sm_100a;' (or pass --arch)"))
        if not node.tiles and not self.diags:
            self.diags.append(Diagnostic("no tile in file", Loc(self.filename, 1, 1),
                                         "add 'tile NAME { ... }'"))
        return FileSpec(target or "", tiles, ptx, self.filename, locs)

    def build_tile(self, tn) -> TileSpec | None:
        locs: dict[str, Loc] = {"tile": tn.name_loc}
        f: dict = {"operands": {}}
        seen: dict[str, Loc] = {}
        before = len(self.diags)
        for st in tn.statements:
            if self.too_many_errors():
                break
            try:
                key = st.head if st.kind == "keyword" else f"operand {st.head}"
                if key in seen:
                    self.error(f"'{st.head}' given twice in tile '{tn.name}'", st.loc, f"first given at {seen[key]}")
                seen[key] = st.loc
                if st.kind == "operand":
                    self.operand(st, f, locs)
                else:
                    handler = _KEYWORDS.get(st.head)
                    if handler is None:
                        self.error(f"unknown statement '{echo(st.head)}'", st.loc,
                                   _did_you_mean(st.head, list(_KEYWORDS)))
                    locs[st.head] = st.loc
                    handler(self, st, f, locs)
            except _Fail:
                pass
        if len(self.diags) > before:
            return None
        try:
            if "engine" not in f:
                self.error(f"tile '{tn.name}' has no 'engine' statement", tn.name_loc,
                           "add e.g. 'engine tcgen05;' or 'engine mma.sp;'")
            if "m" not in f:
                self.error(f"tile '{tn.name}' has no 'shape' statement", tn.name_loc,
                           "add e.g. 'shape M=128 N=256 K=16;'")
        except _Fail:
            return None
        return TileSpec(name=tn.name, locs=locs, **f)

    def operand(self, st: Statement, f: dict, locs: dict):
        name = st.head
        if name not in OPERAND_NAMES:
            self.error(f"unknown operand '{echo(name)}'", st.loc, _did_you_mean(name, OPERAND_NAMES))
        bare, kv = self.split_args(st, {"major": None, "swizzle": None}, max_bare=2)
        if len(bare) < 2:
            self.error(f"operand {name} needs an element type and a space", st.end_loc,
                       f"e.g. '{name}: bf16 smem;'")
        locs[name] = st.loc
        dtype = self.word(bare[0], "element type", list(TYPES))
        locs[f"{name}.dtype"] = bare[0].loc
        space = self.word(bare[1], "memory space", SPACES)
        locs[f"{name}.space"] = bare[1].loc
        major = swizzle = None
        if "major" in kv:
            major = self.word(kv["major"].value, "major-ness", MAJORS)
            locs[f"{name}.major"] = kv["major"].value.loc
        if "swizzle" in kv:
            swizzle = self.word(kv["swizzle"].value, "swizzle", SWIZZLES)
            locs[f"{name}.swizzle"] = kv["swizzle"].value.loc
        f["operands"][name] = OperandSpec(dtype, space, major, swizzle)

    def engine(self, st, f, locs):
        bare, kv = self.split_args(st, {"cta_group": None, "kind": None, "collector": None},
                                   flags=("ws", "ashift"), max_bare=1)
        if not bare:
            self.error("'engine' needs an engine name", st.end_loc, "one of: " + ", ".join(ENGINES))
        f["engine"] = self.word(bare[0], "engine", ENGINES)
        locs["engine.name"] = bare[0].loc
        if "cta_group" in kv:
            v = kv["cta_group"].value
            f["cta_group"] = self.int_value(v, "cta_group")
            locs["engine.cta_group"] = v.loc
        if "kind" in kv:
            v = kv["kind"].value
            f["kind"] = v.text
            locs["engine.kind"] = v.loc
        if "collector" in kv:
            v = kv["collector"].value
            f["collector"] = v.text
            locs["engine.collector"] = v.loc
        for flag in ("ws", "ashift"):
            if flag in kv:
                f[flag] = True
                locs[f"engine.{flag}"] = kv[flag].value.loc

    def shape(self, st, f, locs):
        _, kv = self.split_args(st, {"M": None, "N": None, "K": None})
        for dim in ("M", "N", "K"):
            if dim not in kv:
                self.error(f"'shape' is missing {dim}=", st.end_loc, "write 'shape M=.. N=.. K=..;'")
        for dim in ("M", "N", "K"):
            v = kv[dim].value
            f[dim.lower()] = self.int_value(v, f"shape {dim}")
            locs[f"shape.{dim}"] = v.loc

    def loop(self, st, f, locs):
        _, kv = self.split_args(st, {"K": None})
        if "K" not in kv:
            self.error("'loop' needs K=", st.end_loc, "write e.g. 'loop K=64;'")
        v = kv["K"].value
        f["k_total"] = self.int_value(v, "loop K")
        locs["loop.K"] = v.loc

    def sparsity(self, st, f, locs):
        from ..isa.sparsity import GRANULARITIES      # the ratios; only a sparse tile pays for the table

        bare, kv = self.split_args(st, {"metadata": None, "pattern": None, "rows": None, "selector": None},
                                   max_bare=1)
        if not bare:
            self.error("'sparsity' needs a ratio", st.end_loc, "one of: " + ", ".join(GRANULARITIES))
        ratio = self.word(bare[0], "sparsity ratio", GRANULARITIES)
        locs["sparsity.ratio"] = bare[0].loc
        sp = SparsitySpec(ratio)
        if "metadata" in kv:
            sp.metadata = self.word(kv["metadata"].value, "metadata source", METADATA_SOURCES)
            locs["sparsity.metadata"] = kv["metadata"].value.loc
        if "pattern" in kv:
            sp.pattern = kv["pattern"].value.text
            locs["sparsity.pattern"] = kv["pattern"].value.loc
        if "rows" in kv:
            sp.rows = self.rows(kv["rows"].value)
            locs["sparsity.rows"] = kv["rows"].value.loc
        if "selector" in kv:
            sp.selector = self.int_value(kv["selector"].value, "selector")
            locs["sparsity.selector"] = kv["selector"].value.loc
        if (sp.pattern or sp.rows) and "metadata" not in kv:
            sp.metadata = "static"
        if sp.metadata == "static" and not (sp.pattern or sp.rows):
            self.error("static metadata needs pattern=NAME or rows=[...]", st.loc)
        if sp.metadata == "runtime" and (sp.pattern or sp.rows):
            self.error("a pattern was given with metadata=runtime", locs.get("sparsity.metadata", st.loc),
                       "use metadata=static, or drop the pattern")
        if sp.pattern and sp.rows:
            self.error("give either pattern= or rows=, not both", locs["sparsity.rows"])
        f["sparsity"] = sp

    def rows(self, v: Value) -> tuple:
        """rows=[[0:1, 2:3], [1:3]]: per row, per chunk, the kept positions (`a:b` pair or one index)."""
        if v.kind != "list" or not v.items or any(r.kind != "list" or not r.items for r in v.items):
            self.error("rows must be a non-empty list of non-empty lists, e.g. [[0:1, 2:3], [1:2]]", v.loc)
        out = []
        for r in v.items:
            row = []
            for c in r.items:
                if c.kind == "ratio":
                    a, b = c.text.split(":")
                    row.append((self.int_literal(a, c.loc, "kept position"),
                                self.int_literal(b, c.loc, "kept position")))
                else:
                    row.append((self.int_value(c, "kept position"),))
            out.append(tuple(row))
        return tuple(out)

    def block_scale(self, st, f, locs):
        """block_scale vec=16|32|1X|2X|4X;  or  block_scale;  (no vector size: the PTX default,
        .block32, written as a bare `.block_scale`, which needs PTX 8.8)."""
        _, kv = self.split_args(st, {"vec": None})
        if "vec" not in kv:
            f["block_scale"] = "implicit"
            locs["block_scale.vec"] = st.loc
            return
        v = kv["vec"].value
        f["block_scale"] = BLOCK_SCALE_VECS[self.word(v, "scale vector size", list(BLOCK_SCALE_VECS))]
        locs["block_scale.vec"] = v.loc

    def negate(self, st, f, locs):
        bare, _ = self.split_args(st, {}, max_bare=2)
        if not bare:
            self.error("'negate' needs A and/or B", st.end_loc)
        for v in bare:
            which = self.word(v, "operand to negate", ("A", "B"))
            if f.get(f"negate_{which.lower()}"):
                self.error(f"{which} is negated twice", v.loc)
            f[f"negate_{which.lower()}"] = True
            locs[f"negate.{which}"] = v.loc

    def saturate(self, st, f, locs):
        self.split_args(st, {})
        f["saturate"] = True

    def _one_int(self, st, f, locs, field_name):
        bare, _ = self.split_args(st, {}, max_bare=1)
        if not bare:
            self.error(f"'{st.head}' needs a value", st.end_loc)
        f[field_name] = self.int_value(bare[0], st.head)
        locs[f"{st.head}.value"] = bare[0].loc

    def max_shift(self, st, f, locs):
        self._one_int(st, f, locs, "max_shift")

    def scale_input_d(self, st, f, locs):
        self._one_int(st, f, locs, "scale_input_d")

    def disable_output_lane(self, st, f, locs):
        bare, _ = self.split_args(st, {}, max_bare=1)
        if not bare:
            self.error("'disable_output_lane' needs a list of 32-bit masks", st.end_loc)
        f["disable_output_lane"] = self.int_list(bare[0], "disable_output_lane")
        locs["disable_output_lane.value"] = bare[0].loc

    def zero_columns(self, st, f, locs):
        _, kv = self.split_args(st, {"mask": None, "cols": None, "shift": None})
        z = ZeroColumnsSpec()
        if "mask" in kv:
            z.value = self.int_value(kv["mask"].value, "zero-column mask descriptor")
            locs["zero_columns.mask"] = kv["mask"].value.loc
        if "cols" in kv:
            v = kv["cols"].value
            if v.kind == "list" and v.items and all(i.kind == "list" for i in v.items):
                z.columns = tuple(self.int_list(i, "zeroed columns") for i in v.items)
            else:
                z.columns = (self.int_list(v, "zeroed columns"),)
            locs["zero_columns.cols"] = v.loc
        if "shift" in kv:
            z.shift = self.int_value(kv["shift"].value, "column shift")
            locs["zero_columns.shift"] = kv["shift"].value.loc
        if (z.value is None) == (z.columns is None):
            self.error("'zero_columns' needs exactly one of mask=0x... or cols=[...]", st.loc)
        f["zero_columns"] = z

    def schedule(self, st, f, locs):
        """schedule cta=128x128x64 warps=2x2 stages=3 [mma=sync|wgmma] [cluster=1|2]
        [persistent=none|static|clc] [raster=G] [split_k=N|stream] [accumulators=1|2] [promote=N];"""
        _, kv = self.split_args(st, {"cta": None, "warps": None, "stages": None, "mma": None, "cluster": None,
                                     "persistent": None, "raster": None, "split_k": None, "accumulators": None,
                                     "promote": None})
        if "cta" not in kv:
            self.error("'schedule' needs cta=MxNxK", st.end_loc, "e.g. 'schedule cta=128x128x64 warps=2x2 stages=3;'")

        def dims(arg, n, what):
            parts = arg.value.text.lower().split("x") if arg.value.kind == "atom" else []
            if len(parts) != n or not all(p.isdigit() and p.strip("0") for p in parts):
                self.error(f"{what} must look like {'x'.join(['N'] * n)}, found '{echo(arg.value.text) or '[...]'}'",
                           arg.value.loc)
            return [self.int_literal(p, arg.value.loc, what) for p in parts]

        cm, cn, ck = dims(kv["cta"], 3, "cta")
        locs["schedule.cta"] = kv["cta"].value.loc
        wm = wn = 1
        if "warps" in kv:
            wm, wn = dims(kv["warps"], 2, "warps")
            locs["schedule.warps"] = kv["warps"].value.loc
        stages = 2
        if "stages" in kv:
            stages = self.int_value(kv["stages"].value, "stages")
            locs["schedule.stages"] = kv["stages"].value.loc
        mma = "sync"
        if "mma" in kv:
            mma = self.word(kv["mma"].value, "schedule mma", SCHEDULE_MMAS)
            locs["schedule.mma"] = kv["mma"].value.loc
        cluster = 1
        if "cluster" in kv:
            cluster = self.int_value(kv["cluster"].value, "cluster")
            locs["schedule.cluster"] = kv["cluster"].value.loc
        sched = ScheduleSpec(cm, cn, ck, wm, wn, stages, mma, cluster)
        if "persistent" in kv:
            sched.persistent = self.word(kv["persistent"].value, "schedule persistent", SCHEDULE_PERSISTENT)
            locs["schedule.persistent"] = kv["persistent"].value.loc
        if "raster" in kv:
            sched.raster = self.int_value(kv["raster"].value, "raster")
            locs["schedule.raster"] = kv["raster"].value.loc
        if "split_k" in kv:
            v = kv["split_k"].value
            sched.split_k = SPLIT_K_STREAM if v.kind == "atom" and v.text == SPLIT_K_STREAM else \
                self.int_value(v, "split_k (a slice count or 'stream')")
            locs["schedule.split_k"] = v.loc
        if "accumulators" in kv:
            sched.accumulators = self.int_value(kv["accumulators"].value, "accumulators")
            locs["schedule.accumulators"] = kv["accumulators"].value.loc
        if "promote" in kv:
            sched.promote = self.int_value(kv["promote"].value, "promote")
            locs["schedule.promote"] = kv["promote"].value.loc
        f["schedule"] = sched

    def scalar(self, v: Value, what: str) -> str:
        """A non-negative decimal literal (`2`, `0.5`, `1.`) that is a finite f32, or `param`; kept as
        written (the kernel rounds it to f32 once: compiler/passes/epilogue_lowering.py)."""
        t = v.text if v.kind == "atom" else ""
        whole, dot, frac = t.partition(".")
        if t == EPILOGUE_PARAM:
            return t
        if not (whole.isdigit() and (frac.isdigit() or not frac) and "." not in frac) or len(t) > 64:
            self.error(f"{what} must be a decimal number such as 0.5, or '{EPILOGUE_PARAM}', found "
                       f"'{echo(v.text) or '[...]'}'", v.loc,
                       f"{what}={EPILOGUE_PARAM} makes it an f32 kernel parameter (negative values included)")
        if float(t) >= 2.0 ** 128:      # rounds to +inf in f32 (PTX ISA 5.2.4: f32 is IEEE binary32)
            self.error(f"{what} = {echo(t)} does not fit f32 (largest finite value about 3.4e38)", v.loc)
        return t

    def epilogue(self, st, f, locs):
        """epilogue [alpha=X|param] [beta=X|param] [bias=none|row|col] [bias_type=f32|f16|bf16] [act=...]
        [acc=f32|s32] [scale=X|param];"""
        _, kv = self.split_args(st, {"alpha": None, "beta": None, "bias": None, "act": None, "acc": None,
                                     "scale": None, "bias_type": None})
        e = EpilogueSpec()
        for key in ("alpha", "beta", "scale"):
            if key in kv:
                setattr(e, key, self.scalar(kv[key].value, key))
                locs[f"epilogue.{key}"] = kv[key].value.loc
        for key, choices in (("bias", EPILOGUE_BIAS), ("act", EPILOGUE_ACTS), ("acc", EPILOGUE_ACCS),
                             ("bias_type", EPILOGUE_BIAS_TYPES)):
            if key in kv:
                setattr(e, key, self.word(kv[key].value, f"epilogue {key}", choices))
                locs[f"epilogue.{key}"] = kv[key].value.loc
        f["epilogue"] = e


_KEYWORDS = {
    "engine": Builder.engine,
    "shape": Builder.shape,
    "loop": Builder.loop,
    "sparsity": Builder.sparsity,
    "block_scale": Builder.block_scale,
    "negate": Builder.negate,
    "saturate": Builder.saturate,
    "max_shift": Builder.max_shift,
    "scale_input_d": Builder.scale_input_d,
    "disable_output_lane": Builder.disable_output_lane,
    "zero_columns": Builder.zero_columns,
    "schedule": Builder.schedule,
    "epilogue": Builder.epilogue,
}


def parse_spec(text: str, filename: str = "<string>", arch: str | None = None) -> FileSpec:
    """Parse DSL text into a FileSpec, or raise CompileError with every diagnostic found.
    `arch` (the CLI's --arch) replaces the file's target; the file then needs none."""
    node = parse(text, filename)
    b = Builder(filename, text)
    spec = b.build(node, arch)
    if b.diags:
        raise CompileError(b.diags, text)
    return spec
