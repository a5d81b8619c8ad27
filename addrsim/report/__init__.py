"""Rendering checks: ``json`` (the one JSON form of a Check), ``text`` (the verify table),
``formats`` (SARIF 2.1.0, JUnit XML), ``explain`` (backward slices), ``plots``.

Layer 7.  May import addrsim.prove and below.
"""
