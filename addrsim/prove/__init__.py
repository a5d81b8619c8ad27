"""Deciding a check: ``verdict`` (the Verdict type and everything a check reports), ``options``,
``machines`` (the kernel's initial states), ``targets`` (the accesses of a buffer), ``query``
(solver queries and minimisation), ``replay`` (concrete confirmation), ``check`` (one
kernel x buffer x layout x property), ``domain`` (witnesses, unreachable, routing, host
limits), ``idioms``, ``probe``, ``wraps`` (float divisions, concrete probing, wrap sites).

Layer 6.  May import every lower layer.
"""
