"""Kernel sources: code objects (``codeobj``: ELF, metadata, kernel descriptors), llvm-objdump
(``disasm``) and assembly listings (``listing``).

Layer 3.  May import addrsim.errors and addrsim.isa.control (which mnemonics branch).
"""
