"""Non-tensor bulk copies from shared to global memory (PTX ISA 9.7.9.25.4.1 `cp.async.bulk`, the
`.global.shared::cta.bulk_group` form) and the bulk async-group instructions that complete them
(`cp.async.bulk.commit_group`, `cp.async.bulk.wait_group{.read}`): the facts and spellings tilec emits, in
one place.

  cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size;
               the copy engine (the async proxy) reads `size` bytes of the executing CTA's shared memory at
               `src` and writes them to global memory at `dst`, asynchronously. Both addresses 16-byte
               aligned, `size` a multiple of 16 (9.7.9.25.4.1). PTX ISA 8.0, sm_90 (libcu++'s cuda::ptx
               table: "PTX ISA 80, SM_90").
  cp.async.bulk.commit_group
               closes the executing thread's bulk copies issued since its last commit into one bulk
               async-group (per thread, like cp.async groups).
  cp.async.bulk.wait_group{.read} N
               waits until at most the thread's N newest bulk groups are pending; with `.read` only until
               their reads of the source are done (the shared memory may then be written again; the
               global writes may still be in flight). PTX ISA 8.0, sm_90.
Proxies: shared memory written by generic-proxy stores (st.shared) and then read by a bulk copy (async
proxy) needs `fence.proxy.async.shared::cta` by the writing threads before the synchronisation that lets
the issuing thread go on (PTX ISA memory consistency model, "Proxies"; 9.7.13.4 membar/fence).
"""
from __future__ import annotations

from .targets import Version

MIN_PTX: Version = (8, 0)           # cp.async.bulk, commit_group, wait_group: introduced in PTX ISA 8.0
MIN_SM = 90                         # Target ISA notes: sm_90 or higher
ALIGN = 16                          # both addresses 16-byte aligned; size a multiple of 16 bytes


def size_problem(size: int) -> str | None:
    """Why `size` bytes cannot be one bulk copy, or None."""
    if size <= 0 or size % ALIGN:
        return f"a cp.async.bulk copies a positive multiple of {ALIGN} bytes, not {size}"
    return None


def store_to_global(dst: str, src: str, size: int | str) -> str:
    """Copy `size` bytes from shared::cta [src] to global [dst], completed through the thread's bulk group."""
    if isinstance(size, int) and size_problem(size):
        raise ValueError(size_problem(size))
    return f"cp.async.bulk.global.shared::cta.bulk_group [{dst}], [{src}], {size};"


COMMIT_GROUP = "cp.async.bulk.commit_group;"


def wait_group(pending: int, read: bool = False) -> str:
    """Wait until at most `pending` of the thread's newest bulk groups are in flight (`read`: until their
    source reads are done)."""
    return f"cp.async.bulk.wait_group{'.read' if read else ''} {pending};"
