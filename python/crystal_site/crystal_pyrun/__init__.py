"""Step timing, peak memory and (record mode) a torch.profiler window for an unmodified
PyTorch program; see docs/record.md for the rank<RANK>.pyrun.json it writes.

install() only watches for `import torch`: nothing of torch is touched in a process that
never imports it (a torchrun agent, a shell helper).
"""
from . import watch


def install():
    watch.on_torch_import(_torch_imported)


def _torch_imported(torch):
    from . import recorder

    recorder.Recorder.from_environment(torch).start()
