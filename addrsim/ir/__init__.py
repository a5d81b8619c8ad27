"""The expression IR: immutable bit-vector expression nodes (Const, Sym, Op) and the operator
registry (ops.OPS: every operator's name, arity, width rule and exact meaning, declared once).

Layer 1 (the lowest).  Imports nothing of addrsim.  Modules: ``ops`` (the registry), ``expr``
(nodes, simplifying constructors, evaluation, traversal), ``poly`` (polynomials over atoms and
their bounds from the conditions' facts).
"""
