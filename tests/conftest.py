"""Shared test settings. Triton kernels run in the interpreter on CPU tensors when no GPU is
present; the variable must be set before triton is first imported, hence here."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
