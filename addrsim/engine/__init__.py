"""Symbolic and concrete execution over the IR: ``machine`` (register file, lanes, EXEC,
memory accesses; dispatches on addrsim.isa.table rows), ``explore`` (paths, merging at join
points, loop heads, the concrete replay loop), ``loops`` (one generic loop iteration and the
induction obligations).

Layer 4.  May import addrsim.ir, addrsim.backends, addrsim.isa, addrsim.loader.
"""
