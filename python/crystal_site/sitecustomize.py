"""crystal's sitecustomize: loaded by every Python process that `crystal record` or
`crystal emulate` starts (they put this directory first on PYTHONPATH).

With CRYSTAL_RUN_DIR set it arranges, once the program imports torch, to time every
optimizer step and write CRYSTAL_RUN_DIR/rank<RANK>.pyrun.json at exit (docs/record.md);
without it, it does nothing. Then it runs the sitecustomize this one hides (the next one on
sys.path, e.g. the distribution's), so the user's own site setup still happens. No failure
here may stop the program: each is one warning line on stderr.
"""
import os
import sys


def _warn(what, err):
    try:
        sys.stderr.write("crystal: warning: %s: %s: %s\n" % (what, type(err).__name__, err))
    except Exception:  # a closed stderr must not stop the program either
        pass


def _start_crystal():
    if not os.environ.get("CRYSTAL_RUN_DIR"):
        return
    try:
        import crystal_pyrun

        crystal_pyrun.install()
    except Exception as err:
        _warn("step timing off", err)


def _chain_hidden_sitecustomize():
    """Execute the next sitecustomize on sys.path after this file's directory."""
    try:
        import importlib.machinery
        import importlib.util

        here = os.path.dirname(os.path.abspath(__file__))
        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["_crystal_chained_sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception as err:
        _warn("the hidden sitecustomize failed", err)


_start_crystal()
_chain_hidden_sitecustomize()
