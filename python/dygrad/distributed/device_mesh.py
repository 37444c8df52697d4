"""torch.distributed.device_mesh (stand-ins: no device meshes yet)."""
from .tensor import DeviceMesh, init_device_mesh  # noqa: F401
