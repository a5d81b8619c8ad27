"""The virtual MI300 (issue 37): a functional emulator of the CDNA3/CDNA4 instructions the
fmha kernels use, run on the real code object, independent of the prover.

Modules: ``wave`` (one wave's registers as numpy vectors), ``memory`` (sparse device
memory and the buffer V#), ``step`` (one instruction: the ALU rows of :mod:`addrsim.isa.alu`
evaluated over 64 lanes by :mod:`addrsim.backends.vector`, SMEM, MUBUF, branches) and
``run`` (a workgroup's waves in turn, a grid).  The layer imports ir, backends, isa and loader
only: never the prover's engine or extraction (tests/test_architecture.py checks it).
"""
