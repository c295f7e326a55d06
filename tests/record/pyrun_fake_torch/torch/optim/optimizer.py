_post_hooks = []
steps_done = 0  # every step of every optimizer, read by the fake profiler


class _Handle:
    def __init__(self, hooks, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self):
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


def register_optimizer_step_post_hook(hook):
    _post_hooks.append(hook)
    return _Handle(_post_hooks, hook)


class Optimizer:
    def step(self):
        global steps_done
        steps_done += 1
        for hook in list(_post_hooks):
            hook(self, (), {})
