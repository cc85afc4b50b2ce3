"""Count, from a PTX file, what a Blackwell GEMM kernel issues: the whole file's instruction sites, the
per-K-block mix of its MMA and copy loops, and the per-tile barrier protocol of each warp role's tile loop.

    python benchmarks/ptx_mix.py KERNEL.ptx [--entry NAME] [--json]

Static counts (instruction sites in the text), read structurally:
- loops are the back edges `bra LABEL` to a label above; an inline-assembly spin loop (a label, an
  `mbarrier.try_wait`, a branch back) counts as one wait, not as a loop;
- the MMA K loop is the innermost loop around `tcgen05.mma`; one `tcgen05.commit` ends each K block in it
  (it releases the block's stage), so per K block = the loop's counts / its commits (a K loop unrolled
  twice has two);
- the copy K loop is the innermost loop around the TMA loads (`cp.async.bulk.tensor` from global), per K
  block = its counts / its `expect_tx` (one per stage filled); a kernel whose threads copy (`ld.global` +
  `st.shared`) has no TMA loop: its copies sit in the MMA K loop, and the script reports their sites;
- a role's tile loop is the innermost loop around its K loop (or, for the epilogue, around `tcgen05.ld`);
  per tile = the tile loop's counts less its K loop's (each K-loop site runs once per K block instead).
Categories: TMA loads / stores, tcgen05.mma / commit / ld / cp / alloc / dealloc, mbarrier init / try_wait
(blocking waits in spin loops, and non-blocking probes) / arrive / expect_tx, elect.sync, bar.sync /
barrier.cluster, fences, ld.global / st.shared / st.global / cp.async, conversions (cvt), mapa, setmaxnreg,
clusterlaunchcontrol.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter

CATEGORIES = [
    ("tma_load", re.compile(r"^cp\.async\.bulk\.tensor\.\S*\.shared::(cluster|cta)\.global\b")),
    ("tma_store", re.compile(r"^cp\.async\.bulk\.tensor\.\S*\.global\.shared::cta\b")),
    ("tma_wait_group", re.compile(r"^cp\.async\.bulk\.(commit_group|wait_group)")),
    ("tcgen05.mma", re.compile(r"^tcgen05\.mma\b")),
    ("tcgen05.commit", re.compile(r"^tcgen05\.commit\b")),
    ("tcgen05.ld", re.compile(r"^tcgen05\.ld\b")),
    ("tcgen05.wait", re.compile(r"^tcgen05\.wait\b")),
    ("tcgen05.cp", re.compile(r"^tcgen05\.cp\b")),
    ("tcgen05.alloc", re.compile(r"^tcgen05\.(alloc|relinquish_alloc_permit)\b")),
    ("tcgen05.dealloc", re.compile(r"^tcgen05\.dealloc\b")),
    ("tcgen05.fence", re.compile(r"^tcgen05\.fence\b")),
    ("mbarrier.init", re.compile(r"^mbarrier\.init\b")),
    ("mbarrier.wait", re.compile(r"^$")),               # a try_wait in a spin loop (counts())
    ("mbarrier.try_wait", re.compile(r"^mbarrier\.(try_wait|test_wait)\b")),
    ("mbarrier.expect_tx", re.compile(r"^mbarrier\.(arrive\.)?expect_tx\b")),
    ("mbarrier.arrive", re.compile(r"^mbarrier\.arrive(?!\.expect_tx)\b")),
    ("elect.sync", re.compile(r"^elect\.sync\b")),
    ("bar.sync", re.compile(r"^(bar|barrier)\.(sync|arrive|red)\b|^barrier\.sync\b")),
    ("barrier.cluster", re.compile(r"^barrier\.cluster\b")),
    ("fence", re.compile(r"^fence\b")),
    ("ld.global", re.compile(r"^ld\.global\b")),
    ("st.shared", re.compile(r"^st\.shared\b")),
    ("st.global", re.compile(r"^st\.global\b")),
    ("cp.async", re.compile(r"^cp\.async\.(ca|cg)\b")),
    ("cvt", re.compile(r"^cvt\.(rn|rz|rm|rp)\w*\.(f16|bf16|e4m3|e5m2|f32)")),
    ("mapa", re.compile(r"^mapa\b")),
    ("setmaxnreg", re.compile(r"^setmaxnreg\b")),
    ("clusterlaunchcontrol", re.compile(r"^clusterlaunchcontrol\b")),
]
_LABEL = re.compile(r"^\s*([$%\w]+):\s*$")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+([$%\w]+)\s*;")


class Line:
    def __init__(self, no: int, text: str):
        self.no, self.text = no, text
        s = text.strip()
        self.label = (_LABEL.match(text).group(1)) if _LABEL.match(text) else None
        body = re.sub(r"^@!?%?\w+\s+", "", s)                        # drop a guard predicate
        self.op = body.split()[0].rstrip(";") if body and not self.label and not body.startswith(("//", "{", "}", ".")) \
            else None
        m = _BRANCH.search(s)
        self.target = m.group(1) if m and self.op and self.op.startswith("bra") else None


def entry_lines(text: str, entry: str | None) -> tuple[str, list[Line]]:
    """The lines of one `.entry` body (the first, or `entry`)."""
    names = re.findall(r"\.entry\s+([$\w]+)\s*\(", text)
    if not names:
        raise SystemExit("no .entry in the file")
    name = entry or names[0]
    start = text.index(name + "(", text.index(".entry"))
    body_start = text.index("{", text.index(")", start))
    depth, i = 0, body_start
    while True:
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                break
        i += 1
    first = text.count("\n", 0, body_start) + 1
    lines = [Line(first + n, t) for n, t in enumerate(text[body_start:i].split("\n"))]
    # labels of a `{ }` block (inline assembly) are local to it: name them per block
    depth, block = 0, 0
    for ln in lines:
        s = ln.text.strip()
        if s == "{":
            depth += 1
            if depth == 2:
                block += 1
        elif s == "}":
            depth -= 1
        elif depth >= 2:
            if ln.label:
                ln.label += f"#{block}"
            if ln.target:
                ln.target += f"#{block}"
    return name, lines


def category(op: str) -> str | None:
    for name, rx in CATEGORIES:
        if rx.search(op):
            return name
    return None


def loops(lines: list[Line]) -> tuple[list[tuple[int, int]], set[int]]:
    """(loops as (first, last) line indices, indices of spin-wait branches). A branch goes to the nearest
    label of its name above it when there is one (inline assembly reuses label names per block)."""
    found, spins = [], set()
    for j, ln in enumerate(lines):
        if ln.target is None:
            continue
        i = next((k for k in range(j - 1, -1, -1) if lines[k].label == ln.target), None)
        if i is None:
            continue
        inside = [lines[k].op for k in range(i + 1, j) if lines[k].op]
        if all(op.startswith(("mbarrier.try_wait", "mbarrier.test_wait", "bra", "@")) or op == "nanosleep"
               for op in inside) and any(op.startswith("mbarrier.") for op in inside):
            spins.update(range(i, j + 1))
            continue
        found.append((i, j))
    return found, spins


SPIN: set[int] = set()          # line indices inside spin-wait loops (analyse sets it)


def counts(lines: list[Line], lo: int, hi: int) -> Counter:
    """Instruction sites of lines[lo..hi] by category; an mbarrier.try_wait inside a spin loop is a
    blocking wait ("mbarrier.wait"), one outside a non-blocking probe ("mbarrier.try_wait")."""
    c: Counter = Counter()
    for idx in range(lo, hi + 1):
        ln = lines[idx]
        if ln.op:
            cat = category(ln.op)
            if cat == "mbarrier.try_wait" and idx in SPIN:
                cat = "mbarrier.wait"
            if cat:
                c[cat] += 1
            c["instructions"] += 1
    return c


def innermost(lps: list[tuple[int, int]], pred) -> tuple[int, int] | None:
    cands = [lp for lp in lps if pred(lp)]
    return min(cands, key=lambda lp: lp[1] - lp[0]) if cands else None


def enclosing(lps, inner):
    cands = [lp for lp in lps if lp != inner and lp[0] <= inner[0] and inner[1] <= lp[1]]
    return min(cands, key=lambda lp: lp[1] - lp[0]) if cands else None


def analyse(text: str, entry: str | None = None) -> dict:
    name, lines = entry_lines(text, entry)
    lps, spins = loops(lines)
    SPIN.clear()
    SPIN.update(spins)

    def has(lp, cat):
        return any(ln.op and category(ln.op) == cat for ln in lines[lp[0]:lp[1] + 1])

    def value(arg: str):
        """An mbarrier.init count: an immediate, or the immediate a register was last set to above."""
        if arg.isdigit():
            return int(arg)
        m = re.findall(rf"mov\.[bus]32\s+{re.escape(arg)},\s*(\d+);", text)
        return int(m[-1]) if len(set(m)) == 1 else arg

    out: dict = {"entry": name, "whole": dict(counts(lines, 0, len(lines) - 1)),
                 "init_counts": [value(m) for m in re.findall(r"mbarrier\.init\S*\s+\[[^\]]+\],\s*([%\w]+);", text)]}

    def per(lp, unit_cat, default=1):
        c = counts(lines, *lp)
        n = c.get(unit_cat, 0) or default
        return {"lines": [lines[lp[0]].no, lines[lp[1]].no], "k_blocks_per_iteration": n,
                "per_k_block": {k: round(v / n, 2) for k, v in c.items()}}

    mma_loop = innermost(lps, lambda lp: has(lp, "tcgen05.mma"))
    tma_loop = innermost(lps, lambda lp: has(lp, "tma_load"))
    roles = {}
    if mma_loop:
        roles["mma"] = {"k_loop": per(mma_loop, "tcgen05.commit")}
    if tma_loop:
        roles["tma"] = {"k_loop": per(tma_loop, "mbarrier.expect_tx")}
    for role, k_loop in (("mma", mma_loop), ("tma", tma_loop)):
        if k_loop is None:
            continue
        tile = enclosing(lps, k_loop)
        if tile is not None:
            whole, k = counts(lines, *tile), counts(lines, *k_loop)
            roles[role]["tile_loop"] = {"lines": [lines[tile[0]].no, lines[tile[1]].no],
                                        "per_tile": dict(+(whole - k))}
    epi = innermost(lps, lambda lp: has(lp, "tcgen05.ld"))
    if epi is not None:
        # the innermost loop around tcgen05.ld walks the sub-tiles of D when the tile's accumulator wait is
        # outside it (then the enclosing loop walks the tiles), else it is the tile loop itself
        sub = epi if not has(epi, "mbarrier.try_wait") else None
        tile = enclosing(lps, epi) if sub else epi
        r = {} if tile is None else \
            {"tile_loop": {"lines": [lines[tile[0]].no, lines[tile[1]].no],
                           "per_tile": dict(counts(lines, *tile) - (counts(lines, *sub) if sub else Counter()))}}
        if sub:
            r["sub_loop"] = {"lines": [lines[sub[0]].no, lines[sub[1]].no], "per_sub_tile": dict(counts(lines, *sub))}
        roles["epilogue"] = r
    out["roles"] = roles
    out["spin_waits"] = out["whole"].get("mbarrier.wait", 0)
    out["loops"] = [{"lines": [lines[lo].no, lines[hi].no],
                     "depth": sum(1 for o in lps if o != (lo, hi) and o[0] <= lo and hi <= o[1]),
                     "counts": dict(counts(lines, lo, hi))} for lo, hi in sorted(lps)]
    return out


def render(a: dict) -> str:
    keys = [c for c, _ in CATEGORIES]
    w = a["whole"]
    lines = [f"entry {a['entry']}: {w.get('instructions', 0)} instructions; "
             + ", ".join(f"{k} {w[k]}" for k in keys if w.get(k)),
             f"  mbarrier.init arrival counts: {a['init_counts']}; spin-wait loops: {a['spin_waits']}"]
    for role, r in a["roles"].items():
        if "k_loop" in r:
            k = r["k_loop"]
            lines.append(f"  {role} K loop (lines {k['lines'][0]}-{k['lines'][1]}, {k['k_blocks_per_iteration']} K "
                         f"block(s) per iteration), per K block: " +
                         ", ".join(f"{c} {k['per_k_block'][c]:g}" for c in keys if k["per_k_block"].get(c)))
        if "sub_loop" in r:
            t = r["sub_loop"]
            lines.append(f"  {role} sub-tile loop (lines {t['lines'][0]}-{t['lines'][1]}), per sub-tile: " +
                         ", ".join(f"{c} {t['per_sub_tile'][c]}" for c in keys if t["per_sub_tile"].get(c)))
        if role == "epilogue" and "tile_loop" not in r:
            lines.append("  epilogue: no tile loop (one tile per CTA)")
        if "tile_loop" in r:
            t = r["tile_loop"]
            inner = "its sub-tile loop" if "sub_loop" in r else "the K loop"
            lines.append(f"  {role} tile loop (lines {t['lines'][0]}-{t['lines'][1]}), per tile outside {inner}: " +
                         ", ".join(f"{c} {t['per_tile'][c]}" for c in keys if t["per_tile"].get(c)))
    return "\n".join(lines)


def render_loops(a: dict) -> str:
    keys = [c for c, _ in CATEGORIES]
    return "\n".join(f"  {'  ' * lp['depth']}loop lines {lp['lines'][0]}-{lp['lines'][1]}: " +
                     ", ".join(f"{c} {lp['counts'][c]}" for c in keys + ["instructions"] if lp["counts"].get(c))
                     for lp in a["loops"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ptx", help="a PTX file (- for stdin)")
    p.add_argument("--entry", help="which .entry (default: the first)")
    p.add_argument("--json", action="store_true", help="print the counts as JSON")
    p.add_argument("--loops", action="store_true", help="also list every loop (nesting, line range, counts)")
    args = p.parse_args(argv)
    text = sys.stdin.read() if args.ptx == "-" else open(args.ptx).read()
    a = analyse(text, args.entry)
    text = json.dumps(a, indent=2, sort_keys=True) if args.json else \
        render(a) + ("\n" + render_loops(a) if args.loops else "")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
