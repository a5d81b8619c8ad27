"""Models as data (the YAML files in models/): ``schema`` (reading and checking them),
``layout`` (a layout as a value), ``hosts`` (which family, host and contract describe a kernel),
``problem`` (one kernel in one layout: arguments, domain layers, expected offsets), ``parse``
(the one expression parser), ``models`` (the facade re-exporting the public names).

Layer 5.  May import addrsim.ir, addrsim.backends, addrsim.loader.
"""
