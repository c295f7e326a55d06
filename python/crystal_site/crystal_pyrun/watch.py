"""Run a callback right after `import torch` finishes, without importing torch ourselves.

A meta-path finder answers the first lookup of "torch" with the real spec whose loader is
wrapped: exec_module runs torch's __init__ and then the callback. The finder removes itself
at that first lookup, so no other import is affected.
"""
import sys

from . import warn


class _LoaderAfter:
    """Delegates to the real loader; calls `after(module)` once the module is executed."""

    def __init__(self, loader, after):
        self._loader = loader
        self._after = after

    def __getattr__(self, name):  # get_resource_reader, is_package, ... stay the real ones
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._after(module)
        except Exception as err:
            warn.once("step timing off", err)


class _TorchFinder:
    def __init__(self, after):
        self._after = after

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _LoaderAfter(spec.loader, self._after)
        return spec


def on_torch_import(after):
    if "torch" in sys.modules:
        after(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder(after))
