"""torch.backends.mkldnn: dygrad's CPU GEMM may use oneDNN, but there is no switch for it here."""
enabled = True


def is_available():
    return False
