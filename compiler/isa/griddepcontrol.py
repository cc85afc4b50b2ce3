"""griddepcontrol (PTX ISA 9.7.13, Parallel Synchronization and Communication Instructions: griddepcontrol;
`griddepcontrol.{launch_dependents,wait}`; sm_90 and PTX ISA 7.8 on): programmatic dependent launch.

A grid launched with the programmatic stream serialization attribute (CUDA Driver API cuLaunchKernelEx,
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) may start while the grid before it in the stream is
still running, once every CTA of that grid has executed `griddepcontrol.launch_dependents` (or exited).
`griddepcontrol.wait` makes the executing thread wait until the grids it depends on have completed and
their memory operations are performed and visible to it; without such a dependency (a plain launch, the
first grid of a stream) it returns at once. So a kernel whose every thread waits before its first access
to global memory computes the same result however it is launched, and one that signals early lets the
next grid's CTAs take the SMs its own CTAs leave and run their set-up (shared memory, barriers) meanwhile.
`launch_dependents` repeated by threads of a CTA has no effect past the first.
"""
from __future__ import annotations

from .targets import Version

GRIDDEPCONTROL_PTX: Version = (7, 8)
LAUNCH_DEPENDENTS = "griddepcontrol.launch_dependents;"
WAIT = "griddepcontrol.wait;"
