def is_available():
    return True


def is_initialized():
    return False
