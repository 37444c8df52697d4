"""dygrad.backends: the flags torch.backends exposes that CPU scripts set (allow_tf32, cudnn.benchmark ...).
They are stored and read back as torch does; none changes dygrad's float32 arithmetic, which is always full
float32 (there is no TF32 hardware path on the CPU)."""
from . import cpu, cuda, cudnn, mkldnn, mps  # noqa: F401
