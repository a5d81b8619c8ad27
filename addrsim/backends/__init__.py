"""Translations of the IR, one module per backend, each a table keyed on the operator registry
and checked against it at import: ``z3_bv`` (Z3 bit-vectors, exact), ``z3_int`` (Z3 integers,
exact with mod, or int mode), ``ideal`` (the exact-integer int mode on Python ints),
``vector`` (numpy, many points at once), ``sympy_text`` (readable formulas, display only).

Layer 2.  May import addrsim.ir only (sympy_text also backends.ideal).
"""
