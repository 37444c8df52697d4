"""torch.backends.cuda: matmul.allow_tf32 (False by default, as torch), the SDPA backend switches and sdp_kernel,
is_built()."""


class _MatmulFlags:
    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _MatmulFlags()


def is_built():
    return False


# The scaled-dot-product-attention backend switches torch keeps (flash, memory-efficient, math, cuDNN): recorded
# and reported as torch does, so code that sets or queries them runs; dygrad's attention has one implementation
# (its flash kernel) and does not consult them (docs/pytorch-api.md).
_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def flash_sdp_enabled():
    return _sdp["flash"]


def enable_flash_sdp(enabled):
    _sdp["flash"] = bool(enabled)


def math_sdp_enabled():
    return _sdp["math"]


def enable_math_sdp(enabled):
    _sdp["math"] = bool(enabled)


def mem_efficient_sdp_enabled():
    return _sdp["mem_efficient"]


def enable_mem_efficient_sdp(enabled):
    _sdp["mem_efficient"] = bool(enabled)


def cudnn_sdp_enabled():
    return _sdp["cudnn"]


def enable_cudnn_sdp(enabled):
    _sdp["cudnn"] = bool(enabled)


class sdp_kernel:  # noqa: N801 (torch's name; a context manager)
    """Sets the four switches for the block and restores them after (torch's deprecated form of
    torch.nn.attention.sdpa_kernel)."""

    def __init__(self, enable_flash=True, enable_math=True, enable_mem_efficient=True, enable_cudnn=True):
        self._wanted = {"flash": enable_flash, "math": enable_math, "mem_efficient": enable_mem_efficient,
                        "cudnn": enable_cudnn}

    def __enter__(self):
        self._saved = dict(_sdp)
        _sdp.update({k: bool(v) for k, v in self._wanted.items()})
        return self

    def __exit__(self, *exc):
        _sdp.update(self._saved)
        return False
