"""A fake `torch` for testing python/crystal_site on a machine without PyTorch: just the
names crystal_pyrun uses, with a GPU clock the test program advances (cuda._advance)."""
__version__ = "2.11.0+fake"
from . import _C, cuda, distributed, nn, optim, profiler  # noqa: E402,F401
