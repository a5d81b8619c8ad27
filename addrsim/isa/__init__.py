"""The CDNA3/CDNA4 instruction table: ``alu`` (the meaning of each SALU/VALU mnemonic, one
row each), ``memory`` (V# fields, access sizes, the MUBUF range check), ``control`` (branch
conditions), ``table`` (what every instruction is and writes: the one place mnemonics are read).

Layer 3.  May import addrsim.ir.
"""
