"""Value ranges of a kernel's integer registers, and the proof that its address arithmetic never wraps.

`address_wraps(ptx, params, grid)` runs an interval analysis (abstract interpretation over the kernel's
control-flow graph, PTX parsed by compiler/emulator/parse.py) with the launch-time parameters (M, N, K or
m_total, n_total: exact values or (lo, hi) ranges) and the launch grid given, and returns every 32-bit
integer instruction on an *address path* whose exact result can leave its type's range: a product or sum
that can reach 2^32 (or a difference below 0) in a `.u32` / `.b32` register is computed modulo 2^32 by the
hardware (PTX ISA 9.7.1 Integer Arithmetic Instructions: `add`, `mul.lo`, `mad.lo`, `shl` keep the low 32
bits), so such an address would be silently wrong. 64-bit products (`mul.wide.u32`: the full 64-bit product
of two 32-bit operands; `mul.lo.u64` of values below 2^32) cannot wrap at these sizes.

Address path: every register that an address operand `[...]` of a memory instruction reads (ld, st,
cp.async, ldmatrix, mbarrier, the coordinates of a TMA copy; not the TMEM addresses of tcgen05), and,
transitively, every source register of an instruction that writes one (flow-insensitive: a register name
reused for other work is checked everywhere, which only adds checks).

The domain: per register an interval [lo, hi] of integers, or unknown (a value loaded from memory, a
generic pointer: never a product of launch sizes; a 32-bit instruction on an address path that combines
an unknown value is reported too). Thread and CTA coordinates are the ranges the launch gives them
(%tid.x < the `.reqntid` / `.maxntid` count, %ctaid.* < the grid, %nctaid.* = the grid). The address of
a shared variable lies in the shared window, below 2^18 (228 KB is the most shared memory an SM has:
CUDA C++ Programming Guide, "Technical Specifications per Compute Capability", compute capability 9.0 /
10.0). Loops reach a fixpoint by widening a growing bound to its type's limit, then narrowing with the
branch conditions (`setp` + `@p bra`: a counter compared with its limit); results that can leave their
type's range become the whole range. Non-relational: with parameter *ranges*, a quantity bounded only by
a relation between parameters (a rasterised tile index below (M/tm)*(N/tn)) is not seen; the tests give
exact parameters at the corners of each kernel's stated limits (`problem_corners`).
"""
from __future__ import annotations

from dataclasses import dataclass

from .parse import Instr, Kernel, address, parse_module, vector

SHARED_WINDOW = 1 << 18          # shared-window addresses are below 2^18 (see the module docstring)

Interval = tuple[int, int]       # inclusive bounds


@dataclass(frozen=True)
class Wrap:
    """A 32-bit instruction on an address path whose result can leave its type's range."""
    line: int
    text: str
    low: int | None              # the exact result's range (None: an operand is unknown)
    high: int | None

    def __str__(self) -> str:
        what = "an unknown operand" if self.low is None else f"result range [{self.low}, {self.high}]"
        return f"line {self.line}: {self.text}  ({what})"


_MEMORY = ("ld.", "st.", "cp.", "ldmatrix", "stmatrix", "mbarrier.", "atom.", "red.", "prefetch", "prefetchu")
_INT_TYPES = {"u": False, "b": False, "s": True}
_SPECIAL = {"%laneid": (0, 31)}


def _type_bits(t: str) -> tuple[int, bool] | None:
    """'u32' -> (32, False); 's32' -> (32, True); non-integer types -> None."""
    if len(t) >= 2 and t[0] in _INT_TYPES and t[1:].isdigit():
        return int(t[1:]), _INT_TYPES[t[0]]
    return None


def _limits(bits: int, signed: bool) -> Interval:
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _immediate(tok: str) -> int | None:
    try:
        return int(tok, 0)
    except ValueError:
        return None


def _regs_in(operand: str) -> list[str]:
    """Register names inside an operand (`[%r1+8]`, `{%a, %b}`, `[%tm0, {%c0, %c1}]`)."""
    out, cur, take = [], [], False
    for ch in operand + " ":
        if ch == "%":
            take, cur = True, ["%"]
        elif take and (ch.isalnum() or ch in "_$."):
            cur.append(ch)
        else:
            if take:
                out.append("".join(cur))
            take = False
    return [r for r in out if "." not in r and r not in _SPECIAL]


def _is_memory(ins: Instr) -> bool:
    return ins.op.startswith(_MEMORY) and not ins.op.startswith("ld.param")


class _State:
    """Register intervals (None: unknown) and what each predicate register means."""
    __slots__ = ("regs", "preds")

    def __init__(self, regs=None, preds=None):
        self.regs: dict[str, Interval | None] = regs or {}
        self.preds: dict[str, tuple] = preds or {}

    def copy(self) -> _State:
        return _State(dict(self.regs), dict(self.preds))

    def join(self, other: _State) -> _State:
        regs = dict(self.regs)
        for r, v in other.regs.items():
            if r not in regs:
                regs[r] = v
            else:
                u = regs[r]
                regs[r] = None if u is None or v is None else (min(u[0], v[0]), max(u[1], v[1]))
        preds = {p: f for p, f in self.preds.items() if other.preds.get(p) == f}
        return _State(regs, preds)

    def same(self, other: _State) -> bool:
        return self.regs == other.regs and self.preds == other.preds

    def set(self, reg: str, value: Interval | None) -> None:
        self.regs[reg] = value
        for p in [p for p, f in self.preds.items() if reg in (f[2], f[3]) or p == reg]:
            del self.preds[p]


class _Analysis:
    def __init__(self, kernel: Kernel, params: dict[str, int | Interval], grid, cluster):
        self.k = kernel
        self.params = {}
        for full, _ty in kernel.params:
            short = kernel.param_short(full).removeprefix(f"{kernel.name}_")
            if short in params:
                v = params[short]
                self.params[full] = (v, v) if isinstance(v, int) else tuple(v)
        ntid = kernel.reqntid or kernel.maxntid or (1024, 1, 1)
        cl = kernel.cluster if kernel.cluster != (1, 1, 1) else cluster
        gx, gy, gz = grid
        self.special = {"%tid.x": (0, ntid[0] - 1), "%tid.y": (0, ntid[1] - 1), "%tid.z": (0, ntid[2] - 1),
                        "%ctaid.x": (0, gx - 1), "%ctaid.y": (0, gy - 1), "%ctaid.z": (0, gz - 1),
                        "%nctaid.x": (gx, gx), "%nctaid.y": (gy, gy), "%nctaid.z": (gz, gz),
                        "%cluster_ctarank": (0, cl[0] * cl[1] * cl[2] - 1), "%laneid": (0, 31)}
        self.shared = {d.name for d in kernel.shared}
        self.blocks, self.succ = self._cfg()
        self.slice = self._address_slice()

    # ---- structure -------------------------------------------------------------------------------
    def _cfg(self):
        code = self.k.code
        leaders = {0} | set(self.k.labels.values())
        for i, ins in enumerate(code):
            if ins.op.startswith(("bra", "ret", "exit")):
                leaders.add(i + 1)
        starts = sorted(x for x in leaders if x < len(code))
        blocks = [(s, (starts[j + 1] if j + 1 < len(starts) else len(code))) for j, s in enumerate(starts)]
        index = {s: j for j, (s, _) in enumerate(blocks)}
        succ = []
        for j, (s, e) in enumerate(blocks):
            last = code[e - 1]
            nxt = [(j + 1, None)] if e < len(code) else []
            if last.op.startswith("bra"):
                target = index[self.k.labels[last.args[0]]]
                if last.pred is None:
                    succ.append([(target, None)])
                else:
                    taken = (last.pred, not last.negate)
                    succ.append([(target, taken)] + [(b, (last.pred, last.negate)) for b, _ in nxt])
            elif last.op.startswith(("ret", "exit")):
                succ.append([] if last.pred is None else nxt)
            else:
                succ.append(nxt)
        return blocks, succ

    def _address_slice(self) -> set[str]:
        want: set[str] = set()
        for ins in self.k.code:
            if _is_memory(ins):
                for a in ins.args:
                    if a.startswith("["):
                        want.update(_regs_in(a))
        defs: dict[str, list[Instr]] = {}
        for ins in self.k.code:
            for d in self._dests(ins):
                defs.setdefault(d, []).append(ins)
        todo = list(want)
        while todo:
            r = todo.pop()
            for ins in defs.get(r, ()):
                for a in self._sources(ins):
                    for s in _regs_in(a):
                        if s not in want:
                            want.add(s)
                            todo.append(s)
        return want

    @staticmethod
    def _dests(ins: Instr) -> list[str]:
        if not ins.args or ins.args[0].startswith("[") or ins.op.startswith(("st.", "bra", "tcgen05.dealloc")):
            return []
        return [r for r in _regs_in(ins.args[0])]

    @staticmethod
    def _sources(ins: Instr) -> tuple[str, ...]:
        return ins.args[1:]

    # ---- values ----------------------------------------------------------------------------------
    def value(self, st: _State, tok: str) -> Interval | None:
        tok = tok.strip()
        if tok in self.special:
            return self.special[tok]
        if tok.startswith("%"):
            return st.regs.get(tok)
        v = _immediate(tok)
        if v is not None:
            return (v, v)
        if tok in self.shared:
            return (0, SHARED_WINDOW - 1)
        return None

    def step(self, st: _State, ins: Instr, check: list | None) -> None:
        """Apply one instruction to `st` (in place); with `check`, record a Wrap for a 32-bit address-path
        result that can leave its type's range. A guarded instruction runs in the state where its guard
        holds, and the result is joined with the state where it does not."""
        if ins.pred is not None and not ins.op.startswith("bra"):
            taken = self.refine(st, ins.pred, not ins.negate)
            skipped = self.refine(st, ins.pred, ins.negate)
            if taken is not None:
                self._step(taken, ins, check)
            joined = taken if skipped is None else skipped if taken is None else taken.join(skipped)
            if joined is not None:
                st.regs, st.preds = joined.regs, joined.preds
            return
        self._step(st, ins, check)

    def _step(self, st: _State, ins: Instr, check: list | None) -> None:
        parts = ins.parts
        base = parts[0]
        dests = self._dests(ins)
        if base == "setp":
            self._setp(st, ins)
            return
        if not dests:
            return
        exact, bits, signed = self._exact(st, ins, parts)
        for d in dests:
            if check is not None and d in self.slice and bits == 32 and self._arith(parts):
                lo, hi = _limits(32, signed)
                if exact is None or exact[0] < lo or exact[1] > hi:
                    check.append(Wrap(ins.line, ins.text, *(exact or (None, None))))
        if len(dests) != 1 or exact is None or bits is None:
            result = None
        else:
            lo, hi = _limits(bits, signed)
            result = exact if lo <= exact[0] and exact[1] <= hi else (lo, hi)
        for d in dests:
            st.set(d, result if len(dests) == 1 else None)

    @staticmethod
    def _arith(parts: list[str]) -> bool:
        """Instructions whose result can wrap: add, sub, mul.lo, mad.lo, shl (and mul / mad without .wide)."""
        base = parts[0]
        return base in ("add", "sub", "shl", "neg") or (base in ("mul", "mad") and "wide" not in parts
                                                        and "hi" not in parts)

    def _exact(self, st: _State, ins: Instr, parts: list[str]):
        """(exact result interval or None, destination bits, signed) of an instruction."""
        base, args = parts[0], ins.args
        tb = _type_bits(parts[-1])
        if base == "cvt":
            dst = _type_bits(parts[-2]) if len(parts) >= 3 else None
            src = self.value(st, args[1]) if len(args) > 1 else None
            return src, (dst[0] if dst else None), (dst[1] if dst else False)
        if base == "clusterlaunchcontrol" and len(parts) > 2 and parts[2].startswith("get_first_ctaid::"):
            # the first ctaid of the canceled cluster (PTX ISA 9.7.13.18, clusterlaunchcontrol.query_cancel):
            # a CTA of this launch's grid, so within %ctaid's range along that dimension
            return self.special.get("%ctaid." + parts[2].split("::")[1]), 32, False
        if tb is None:
            return None, None, False
        bits, signed = tb
        if base == "ld":
            if "param" in parts:
                return self.params.get(address(args[1])[0]), bits, signed
            return None, bits, signed
        vals = [self.value(st, a) for a in args[1:]]
        if base in ("and", "or", "xor") and not signed:
            # a negative immediate mask is its two's-complement bit pattern (PTX ISA 4.5.1, integer constants)
            vals = [v if v is None or v[0] >= 0 or v[0] != v[1] else (v[0] % (1 << bits),) * 2 for v in vals]
        if base == "mov":
            return vals[0], bits, signed
        if base == "cvta":
            return None, bits, signed
        if "wide" in parts:
            bits *= 2
        if base == "selp":                 # d = p ? a : b: each operand where the predicate says so
            on, off = self.refine(st, args[3], True), self.refine(st, args[3], False)
            a = None if on is None else self.value(on, args[1])
            b = None if off is None else self.value(off, args[2])
            if on is None or off is None:
                return (b if on is None else a), bits, signed
            return (None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))), bits, signed
        if any(v is None for v in vals):
            return None, bits, signed
        if base == "add":
            (a, b), = [vals[:2]]
            return (a[0] + b[0], a[1] + b[1]), bits, signed
        if base == "sub":
            a, b = vals[:2]
            return (a[0] - b[1], a[1] - b[0]), bits, signed
        if base in ("mul", "mad"):
            a, b = vals[:2]
            prods = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
            lo, hi = min(prods), max(prods)
            if base == "mad":
                c = vals[2]
                lo, hi = lo + c[0], hi + c[1]
            if "hi" in parts:
                return None, bits, signed
            return (lo, hi), bits, signed
        if base == "shl":
            a, s = vals[:2]
            return (a[0] << s[0], a[1] << s[1]), bits, signed
        if base == "shr":
            a, s = vals[:2]
            return (a[0] >> s[1], a[1] >> s[0]), bits, signed
        if base in ("div", "rem"):
            a, d = vals[:2]
            if d[0] <= 0 or a[0] < 0:
                return None, bits, signed
            if base == "div":
                return (a[0] // d[1], a[1] // d[0]), bits, signed
            return ((a[0], a[1]) if a[1] < d[0] else (0, min(a[1], d[1] - 1))), bits, signed
        if base in ("min", "max"):
            a, b = vals[:2]
            f = min if base == "min" else max
            return (f(a[0], b[0]), f(a[1], b[1])), bits, signed
        if base == "and" and not signed:
            a, b = vals[:2]
            if a[0] < 0 or b[0] < 0:
                return None, bits, signed
            return (0, min(a[1], b[1])), bits, signed
        if base in ("or", "xor") and not signed:
            a, b = vals[:2]
            if a[0] < 0 or b[0] < 0:
                return None, bits, signed
            return (0, (1 << max(a[1], b[1]).bit_length()) - 1), bits, signed
        if base == "bfe" and not signed:
            length = vals[2]
            return (0, (1 << min(length[1], bits)) - 1), bits, signed
        return None, bits, signed

    def _setp(self, st: _State, ins: Instr) -> None:
        parts, args = ins.parts, ins.args
        for d in _regs_in(args[0]):
            st.preds.pop(d, None)
        if len(parts) == 3 and len(args) == 3 and ins.pred is None:
            tb = _type_bits(parts[2])
            if tb is not None and tb[0] == 32 and not tb[1]:
                st.preds[args[0]] = (parts[1], parts[2], args[1].strip(), args[2].strip())

    _NEGATE = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}

    def refine(self, st: _State, pred: str, holds: bool) -> _State | None:
        """`st` on the edge where predicate `pred` is `holds`; None when that edge cannot be taken."""
        fact = st.preds.get(pred)
        if fact is None:
            return st
        cmp, _ty, a_tok, b_tok = fact
        if not holds:
            cmp = self._NEGATE.get(cmp, "")
        a, b = self.value(st, a_tok), self.value(st, b_tok)
        if a is None or b is None:
            return st
        (al, ah), (bl, bh) = a, b
        if cmp == "lt":
            ah, bl = min(ah, bh - 1), max(bl, al + 1)
        elif cmp == "le":
            ah, bl = min(ah, bh), max(bl, al)
        elif cmp == "gt":
            al, bh = max(al, bl + 1), min(bh, ah - 1)
        elif cmp == "ge":
            al, bh = max(al, bl), min(bh, ah)
        elif cmp == "eq":
            al = bl = max(al, bl)
            ah = bh = min(ah, bh)
        elif cmp == "ne":
            if bl == bh:
                al += al == bl
                ah -= ah == bl
            if al == ah:
                bl += bl == al
                bh -= bh == al
        else:
            return st
        if al > ah or bl > bh:
            return None
        out = st.copy()
        for tok, v in ((a_tok, (al, ah)), (b_tok, (bl, bh))):
            if tok.startswith("%") and tok in out.regs:
                out.regs[tok] = v
        return out

    # ---- fixpoint --------------------------------------------------------------------------------
    def run_block(self, j: int, entry: _State, check: list | None = None) -> _State:
        st = entry.copy()
        s, e = self.blocks[j]
        for ins in self.k.code[s:e]:
            self.step(st, ins, check)
        return st

    def edges(self, j: int, out: _State):
        for target, cond in self.succ[j]:
            st = out if cond is None else self.refine(out, *cond)
            if st is not None:
                yield target, st

    def loop_facts(self, head: int, st: _State) -> tuple[set[str], list[int]]:
        """(registers written in the loop whose head is block `head`, the values its comparisons use in
        state `st`, ascending). The emitters lay loops out contiguously: the body is the blocks from the
        head to the last block that branches back to it."""
        latch = max(j for j, succ in enumerate(self.succ) for t, _ in succ if t == head and j >= head)
        defined: set[str] = set()
        values = set()
        s, e = self.blocks[head][0], self.blocks[latch][1]
        body = self.k.code[s:e]
        for ins in body:
            defined.update(self._dests(ins))
        for ins in body:
            if ins.op.startswith("setp"):
                for tok in ins.args[1:3]:
                    v = self.value(st, tok)
                    if v is not None and tok not in defined:      # a limit, not the loop's own counter
                        values.update((v[1] - 1, v[1], v[1] + 1))
        return defined, sorted(values)

    def solve(self) -> dict[int, _State]:
        entries: dict[int, _State] = {0: _State()}
        visits: dict[int, int] = {}
        work = [0]
        while work:
            j = work.pop(0)
            out = self.run_block(j, entries[j])
            for t, st in self.edges(j, out):
                old = entries.get(t)
                new = st if old is None else old.join(st)
                if old is not None and t <= j:                 # a back edge: t heads a loop
                    visits[t] = visits.get(t, 0) + 1
                    if visits[t] > 2:
                        defined, thresholds = self.loop_facts(t, new)
                        # thresholds first; past a few rounds every growing bound goes to the type's limit
                        new = _widen(old, new, defined, thresholds if visits[t] < 8 else [])
                if old is None or not new.same(old):
                    entries[t] = new
                    if t not in work:
                        work.append(t)
        # narrowing: from this post-fixpoint, recompute each block's entry from its predecessors (in
        # order, using the newest values); every step stays above the least fixpoint
        preds: dict[int, list[int]] = {}
        for j, succ in enumerate(self.succ):
            for t, _ in succ:
                preds.setdefault(t, []).append(j)
        outs = {j: self.run_block(j, st) for j, st in entries.items()}
        for _ in range(4):
            for j in sorted(entries):
                new = _State() if j == 0 else None
                for p in preds.get(j, ()):
                    if p not in outs:
                        continue
                    for t, st in self.edges(p, outs[p]):
                        if t == j:
                            new = st if new is None else new.join(st)
                if new is not None:
                    entries[j] = new
                    outs[j] = self.run_block(j, new)
        return entries


def _widen(old: _State, new: _State, defined: set[str], thresholds: list[int]) -> _State:
    """Widen the registers the loop writes (`defined`) whose bounds grew: a growing upper bound jumps to the
    next threshold (a value the loop compares with: its counter's limit), else past every type's range; a
    falling lower bound to 0 (or below every type's range). Registers the loop only carries keep their
    join (they converge with the code around the loop)."""
    regs = {}
    for r, v in new.regs.items():
        u = old.regs.get(r)
        if v is None or u is None or r not in defined:
            regs[r] = v
            continue
        lo = v[0] if v[0] >= u[0] else (0 if v[0] >= 0 else -(1 << 64))
        hi = v[1] if v[1] <= u[1] else next((t for t in thresholds if t >= v[1]), 1 << 65)
        regs[r] = (lo, hi)
    return _State(regs, dict(new.preds))


def address_wraps(ptx: str, params: dict[str, int | Interval], grid: tuple[int, int, int],
                  entry: str | None = None, cluster: tuple[int, int, int] = (1, 1, 1)) -> list[Wrap]:
    """Every 32-bit instruction on an address path of kernel `entry` (default: the first) that can
    compute a result outside its type's range, for launch parameters `params` (by short name: M, N, K,
    m_total, n_total; an int or an inclusive (lo, hi)) and the launch grid `grid` (in CTAs)."""
    kernel = parse_module(ptx).kernel(entry)
    an = _Analysis(kernel, params, grid, cluster)
    entries = an.solve()
    found: list[Wrap] = []
    for j in sorted(entries):
        an.run_block(j, entries[j], found)
    return sorted(set(found), key=lambda w: w.line)


def problem_corners(abi: dict) -> list[tuple[int, int, int]]:
    """Problem sizes (M, N, K) at the corners of a kernel's stated limits (`abi["limits"]`, within
    `abi["requires"]`): each size its smallest or its largest accepted value, the largest taken with the
    sizes chosen before it held (M then N, and N then M; K last, fixed for tcgen05 kernels)."""
    from ..runtime import abi as abi_mod

    units = abi_mod.size_units(abi)
    out = set()
    for first, second in (("M", "N"), ("N", "M")):
        for a in (units[first], abi_mod.largest(abi, first)):
            for b in (units[second], abi_mod.largest(abi, second, {first: a})):
                dims = {first: a, second: b}
                for k in (units["K"], abi_mod.largest(abi, "K", dims)):
                    out.add((dims["M"], dims["N"], k))
    return sorted(out)
