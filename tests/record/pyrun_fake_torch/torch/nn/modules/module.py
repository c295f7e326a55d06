from ...optim.optimizer import _Handle

_forward_pre_hooks = []


def register_module_forward_pre_hook(hook):
    _forward_pre_hooks.append(hook)
    return _Handle(_forward_pre_hooks, hook)


class Module:
    def __call__(self, *args):
        for hook in list(_forward_pre_hooks):
            hook(self, args)
        return args
