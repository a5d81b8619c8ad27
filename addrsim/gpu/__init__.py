"""What runs on the GPU machine with PyTorch alone: ``crossrun`` (the cross-check runner of a
JSON plan), ``attention`` and ``attention_triton`` (reference attention backward).

Beside the layers: imports only addrsim.model.layout (pure Python) and PyTorch/Triton.
"""
