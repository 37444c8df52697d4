"""dygrad.ops: one handle per op of the op table (`dg.ops.matmul`, `dg.ops.rms_norm`, ...), and `dg.ops.aten`,
the ATen names a policy ported from PyTorch uses (`dg.ops.aten.mm.default` is `dg.ops.matmul`).

These are what selective-recompute policies receive and name (dygrad.utils.checkpoint,
create_selective_checkpoint_contexts): torch passes its policy an `OpOverload` (torch.ops.aten.mm.default);
dygrad passes the handle of the OpDef whose Task is issued. A handle is not callable (dygrad's ops are called
through their Python API); it carries the op's name, fusion class and flags from the table (docs/recompute.md).
"""
from . import _C

__all__ = ["OpOverload", "OpGroup", "aten", "all_ops"]


class OpOverload:
    """The handle of one OpDef. `.default` is itself, so `dg.ops.matmul.default` reads like torch's."""
    __slots__ = ("name", "fusion", "flags", "differentiable")

    def __init__(self, entry):
        self.name = entry["name"]
        self.fusion = entry["fusion"]
        self.flags = tuple(entry["flags"])
        self.differentiable = entry["differentiable"]

    @property
    def default(self):
        return self

    def __repr__(self):
        return f"dygrad.ops.{self.name}"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self!r} is an op handle (for policies); call the op through dygrad's API")


class OpGroup:
    """Several dygrad ops standing for one ATen overload (aten.linear.default: matmul or addmm).
    `op == group` and `op in [group]` hold for each member."""
    __slots__ = ("name", "members")

    def __init__(self, name, members):
        self.name, self.members = name, frozenset(members)

    def __eq__(self, other):
        if isinstance(other, OpGroup):
            return self.members == other.members
        return other in self.members

    def __hash__(self):
        return hash(self.members)

    def __repr__(self):
        return f"dygrad.ops.aten.{self.name} -> {sorted(m.name for m in self.members)}"


_handles = {entry["name"]: OpOverload(entry) for entry in _C._op_table()}


def all_ops():
    """Every op handle, in the table's order."""
    return list(_handles.values())


def by_name(name):
    return _handles[name]


# ATen "name.overload" -> dygrad op names (the ones a ported policy uses: the matmul family, SDPA variants,
# norms, activations, elementwise, softmax, embedding, dropout).
_ATEN = {
    "mm.default": ["matmul"], "bmm.default": ["matmul"], "matmul.default": ["matmul"],
    "addmm.default": ["addmm"], "baddbmm.default": ["addmm"], "linear.default": ["matmul", "addmm"],
    "_scaled_dot_product_flash_attention.default": ["scaled_dot_product_attention"],
    "_scaled_dot_product_flash_attention_for_cpu.default": ["scaled_dot_product_attention"],
    "_scaled_dot_product_efficient_attention.default": ["scaled_dot_product_attention"],
    "_scaled_dot_product_cudnn_attention.default": ["scaled_dot_product_attention"],
    "_scaled_dot_product_fused_attention_overrideable.default": ["scaled_dot_product_attention"],
    "_flash_attention_forward.default": ["scaled_dot_product_attention"],
    "_efficient_attention_forward.default": ["scaled_dot_product_attention"],
    "scaled_dot_product_attention.default": ["scaled_dot_product_attention"],
    "rms_norm.default": ["rms_norm"], "_fused_rms_norm.default": ["rms_norm"],
    "silu.default": ["silu"], "gelu.default": ["gelu"], "relu.default": ["relu"], "sigmoid.default": ["sigmoid"],
    "tanh.default": ["tanh"], "exp.default": ["exp"], "log.default": ["log"], "sqrt.default": ["sqrt"],
    "rsqrt.default": ["rsqrt"], "neg.default": ["neg"], "abs.default": ["abs"], "sin.default": ["sin"],
    "cos.default": ["cos"],
    "add.Tensor": ["add"], "add.Scalar": ["add_scalar"], "sub.Tensor": ["add"], "mul.Tensor": ["mul"],
    "mul.Scalar": ["mul_scalar"], "div.Tensor": ["div"], "div.Scalar": ["div_scalar"],
    "pow.Tensor_Scalar": ["pow_scalar"], "pow.Tensor_Tensor": ["pow"], "where.self": ["where"],
    "masked_fill.Scalar": ["masked_fill"], "clamp.default": ["clamp_scalar"], "maximum.default": ["maximum"],
    "minimum.default": ["minimum"], "lerp.Scalar": ["lerp_scalar"], "lerp.Tensor": ["lerp"],
    "_softmax.default": ["softmax"], "_log_softmax.default": ["log_softmax"], "embedding.default": ["embedding"],
    "mean.dim": ["sum"], "sum.dim_IntList": ["sum"], "cat.default": ["cat"], "clone.default": ["copy"],
    "_to_copy.default": ["copy"], "copy_.default": ["copy"],
    "native_dropout.default": ["bernoulli_mask", "mul"], "bernoulli.p": ["bernoulli"],
}


class _AtenPacket:
    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __getattr__(self, overload):
        key = f"{self._name}.{overload}"
        names = _ATEN.get(key)
        if names is None:
            raise AttributeError(f"dygrad.ops.aten has no mapping for '{key}' (docs/recompute.md lists the table)")
        members = [_handles[n] for n in names]
        return members[0] if len(members) == 1 else OpGroup(key, members)

    def __repr__(self):
        return f"dygrad.ops.aten.{self._name}"


class _Aten:
    def __getattr__(self, name):
        if name.startswith("__") or not any(k.split(".")[0] == name for k in _ATEN):
            raise AttributeError(f"dygrad.ops.aten has no op '{name}' (docs/recompute.md lists the table)")
        return _AtenPacket(name)


aten = _Aten()


def __getattr__(name):
    try:
        return _handles[name]
    except KeyError:
        pass
    from .library import namespace  # custom operators (dygrad.library.custom_op): dg.ops.<namespace>.<name>
    ns = namespace(name)
    if ns is not None:
        return ns
    raise AttributeError(f"module 'dygrad.ops' has no op '{name}'")
