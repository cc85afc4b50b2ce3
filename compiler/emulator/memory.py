"""Global memory of the emulator: named buffers in one flat byte array, a gap between neighbours, so a
stray access hits no buffer and fails.

A buffer is loadable (ld.global / cp.async may read it) unless told otherwise (operands that only the
TMA engine reads), and writable only when told (the outputs). Addresses are plain integers.

A buffer added `uninitialised` (scratch the runtime allocates without clearing: split-K / stream-K's
partial workspace) remembers which of its bytes this launch has written; a read of a byte not yet written
is an error, not a value. On the GPU such a byte holds garbage or a previous launch's partial, so a kernel
that reads it (a reducer that does not wait for every partial of its tile) is wrong whatever the poison
here would have summed to, and a poison value alone can hide it (a later, right reduction overwriting D).
"""
from __future__ import annotations

import numpy as np

from .parse import EmulationError

_GAP = 4096


class FlatMemory:
    def __init__(self, first: int = _GAP):
        self.data = np.zeros(0, np.uint8)
        self.buffers: dict[str, tuple[int, int, bool, bool]] = {}     # name -> (start, size, loadable, writable)
        self.written: dict[str, np.ndarray] = {}    # uninitialised buffers: which bytes this launch stored
        self._next = first

    def add(self, name: str, array, *, loadable: bool = True, writable: bool = False, fill: int | None = None,
            uninitialised: bool = False) -> int:
        """Place `array`'s bytes (C order) in a new buffer; returns its address. `fill` overwrites them
        with one byte value (poison: unwritten outputs show); `uninitialised`: its bytes may not be read
        before this launch writes them (the module docstring)."""
        raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        start = self._next
        end = start + raw.size
        if end + _GAP > self.data.size:
            grown = np.zeros(end + _GAP, np.uint8)
            grown[:self.data.size] = self.data
            self.data = grown
        self.data[start:end] = raw if fill is None else fill
        self.buffers[name] = (start, raw.size, loadable, writable)
        if uninitialised:
            self.written[name] = np.zeros(raw.size, bool)
        self._next = (end + _GAP - 1) // _GAP * _GAP + _GAP
        return start

    def _owner(self, addr: int, n: int) -> tuple[str, bool, bool] | None:
        for name, (start, size, loadable, writable) in self.buffers.items():
            if start <= addr and addr + n <= start + size:
                return name, loadable, writable
        return None

    def read_bytes(self, addr: int, n: int, buffer: str | None = None) -> np.ndarray:
        """n bytes at addr: inside `buffer` when named (a TMA read of its operand), else inside a loadable
        buffer."""
        owner = self._owner(addr, n)
        if owner is None or (buffer is not None and owner[0] != buffer) or (buffer is None and not owner[1]):
            what = f"buffer {buffer}" if buffer else "every loadable buffer"
            raise EmulationError(f"global read of {n} B at {addr:#x} outside {what}")
        written = self.written.get(owner[0])
        if written is not None:
            at = addr - self.buffers[owner[0]][0]
            if not written[at:at + n].all():
                raise EmulationError(f"global read of {n} B at {owner[0]} + {at:#x} before anything was written "
                                     f"there in this launch (uninitialised scratch: on the GPU, garbage or a "
                                     f"previous launch's data; a reader that did not wait for its writer)")
        return self.data[addr:addr + n]

    def write_bytes(self, addr: int, data: np.ndarray) -> None:
        owner = self._owner(addr, len(data))
        if owner is None or not owner[2]:
            raise EmulationError(f"global write of {len(data)} B at {addr:#x} outside every writable buffer")
        self.data[addr:addr + len(data)] = data
        written = self.written.get(owner[0])
        if written is not None:
            at = addr - self.buffers[owner[0]][0]
            written[at:at + len(data)] = True

    def array(self, name: str) -> np.ndarray:
        """The bytes of a buffer (a view)."""
        start, size, _, _ = self.buffers[name]
        return self.data[start:start + size]

    def address(self, name: str) -> int:
        return self.buffers[name][0]
