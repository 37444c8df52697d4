"""torch.backends.cudnn: the flags scripts set (allow_tf32 True by default, as torch; benchmark, deterministic)."""
enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available():
    return False


def version():
    return None
