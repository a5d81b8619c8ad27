"""The command line, one module per command (``verify``, ``scan``, ``diff``, ``explain``,
``repro``, ``crosscheck``), ``common`` (shared options and output), ``cli`` (the parser and exit
codes), ``differential`` (symbolic vs concrete addresses, used by crosscheck and tests).

Layer 9 (above addrsim.api, layer 8).  May import everything.
"""
