"""Shared test settings, set here because they must hold before any engine module is imported.

- The results cache: every test session gets a private one in a temp dir (removed at exit), so no
  test leaves numbers a reader will see, and tests never read a reader's results as their own.
  $LLM_SPEED_TEST_CACHE names a directory to use instead (developers keep one to reuse the built
  C++ kernel between runs); a reader's $LLM_SPEED_CACHE is never used.
- Triton kernels run in the interpreter on CPU tensors when no GPU is present; the variable must be
  set before triton is first imported."""

import atexit
import os
import shutil
import tempfile

import torch

if os.environ.get("LLM_SPEED_TEST_CACHE"):
    os.environ["LLM_SPEED_CACHE"] = os.environ["LLM_SPEED_TEST_CACHE"]
else:
    _private_cache = tempfile.mkdtemp(prefix="llm-speed-test-cache-")
    atexit.register(shutil.rmtree, _private_cache, ignore_errors=True)
    os.environ["LLM_SPEED_CACHE"] = _private_cache

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
