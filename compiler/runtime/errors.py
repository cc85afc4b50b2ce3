"""The runtime's exceptions. Every one is a TilecRuntimeError (a RuntimeError), so `except` can catch the
family; argument mistakes are also ValueErrors."""
from __future__ import annotations


class TilecRuntimeError(RuntimeError):
    """Anything the runtime refuses or cannot do."""


class ArgumentError(TilecRuntimeError, ValueError):
    """A launch argument is wrong: `argument` names it, `what` is the property (dtype, shape, stride,
    alignment, device, sparsity, ...), `expected` and `got` say how."""

    def __init__(self, argument: str, what: str, expected: str, got: str, hint: str | None = None) -> None:
        self.argument, self.what, self.expected, self.got, self.hint = argument, what, expected, got, hint
        text = f"argument {argument}: wrong {what}: expected {expected}, got {got}"
        super().__init__(text + (f" ({hint})" if hint else ""))


class DeviceError(TilecRuntimeError):
    """No GPU, no CUDA driver or Python bindings, or a GPU that cannot run the kernel's target."""
