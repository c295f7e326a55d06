class _ExperimentalConfig:
    def __init__(self, enable_cuda_sync_events=False):
        self.enable_cuda_sync_events = enable_cuda_sync_events
