"""torch.backends.cuda: matmul.allow_tf32 (False by default, as torch), flash/math SDPA switches, is_built()."""


class _MatmulFlags:
    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _MatmulFlags()


def is_built():
    return False


def flash_sdp_enabled():
    return True


def enable_flash_sdp(enabled):
    pass


def math_sdp_enabled():
    return True


def enable_math_sdp(enabled):
    pass


def mem_efficient_sdp_enabled():
    return True


def enable_mem_efficient_sdp(enabled):
    pass
