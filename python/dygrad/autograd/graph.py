"""dygrad.autograd.graph: saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks, save_on_cpu).

While a `saved_tensors_hooks(pack_hook, unpack_hook)` context is active on a thread, every tensor a node
saves for backward, by a built-in op or by a Function's ctx.save_for_backward, is passed to pack_hook and
the node keeps what it returns; when the backward reads it, unpack_hook(packed) gives the tensor back
(src/dygrad/autograd/node.cpp, Node::save). The innermost context applies. Ops run inside a hook save their
own tensors unhooked. Difference from torch: a packed tensor's version is not checked at unpack (the hook
may have copied it), so an in-place change of the original after it was packed goes undetected.
"""
from .. import _C

__all__ = ["saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks"]


class saved_tensors_hooks:  # noqa: N801 -- torch's spelling
    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        _C._push_saved_tensors_hooks(self.pack_hook, self.unpack_hook)
        return self

    def __exit__(self, *exc):
        _C._pop_saved_tensors_hooks()
        return False


class save_on_cpu(saved_tensors_hooks):  # noqa: N801
    """torch's offload of saved tensors to (pinned) CPU memory. dygrad's tensors are on the CPU already, so
    pack keeps the tensor (and its device) and unpack returns it: the hooks run, nothing is copied."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        def pack_to_cpu(tensor):
            return tensor.device, tensor.cpu()

        def unpack_from_cpu(packed):
            device, tensor = packed
            return tensor.to(device, non_blocking=pin_memory)

        super().__init__(pack_to_cpu, unpack_from_cpu)


class disable_saved_tensors_hooks:  # noqa: N801
    """Inside, installing saved_tensors_hooks raises RuntimeError(error_message), as torch's."""

    def __init__(self, error_message):
        self.error_message = error_message

    def __enter__(self):
        global _disabled_message
        self._previous = _disabled_message
        _disabled_message = self.error_message
        return self

    def __exit__(self, *exc):
        global _disabled_message
        _disabled_message = self._previous
        return False


_disabled_message = None
_enter = saved_tensors_hooks.__enter__


def _checked_enter(self):
    if _disabled_message is not None:
        raise RuntimeError(_disabled_message)
    return _enter(self)


saved_tensors_hooks.__enter__ = _checked_enter
