"""Entries of nn (ops/nn.cpp), the fused ops (ops/fused.cpp, ops/fused_attention.cpp) and linalg
(ops/linalg.cpp). torch has no fused rotary embedding or packed swiglu: their `ref` composes torch ops."""
from .spec import FLOATS, Entry, Input

WRITABLE = ("transposed", "strided")  # layouts an in-place operand may take (an expanded view can't be written)


def rope_reference(interleaved):
    def ref(torch, x, cos, sin):
        if interleaved:
            x0, x1 = x[..., 0::2], x[..., 1::2]
            return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
        half = x.shape[-1] // 2
        x0, x1 = x[..., :half], x[..., half:]
        return torch.cat([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)
    return ref


def rotary_attention(heads, mode, is_causal):
    """dygrad's fused rotary_attention of qkv [B, T, 3 heads D]; torch: the three ops it stands for."""
    def call(m, qkv, cos, sin):
        return m.rotary_attention(qkv, cos, sin, heads, mode, is_causal=is_causal)

    def ref(torch, qkv, cos, sin):
        B, T, width = qkv.shape
        D = width // (3 * heads)
        q, k, v = qkv.reshape(B, T, 3, heads, D).permute(2, 0, 3, 1, 4)
        rope = rope_reference(mode == "interleaved")
        out = torch.nn.functional.scaled_dot_product_attention(rope(torch, q, cos, sin), rope(torch, k, cos, sin), v,
                                                               is_causal=is_causal)
        return out.transpose(1, 2).reshape(B, T, heads * D)
    return {"call": call, "ref": ref}


def adamw(m, p, g, exp_avg, exp_avg_sq):
    """One AdamW step at step 3 (dygrad: the fused op, in place, its step count a 0-d float32 tensor that the Task
    increments from 2; torch: its formula), returning the states and the count."""
    lr, b1, b2, eps, wd, step = 1e-2, 0.8, 0.95, 1e-6, 0.1, 3
    if m.__name__ == "dygrad":
        count = m.full((), float(step - 1), device=p.device)
        m.adamw_step([p], [g], [exp_avg], [exp_avg_sq], [count], lr=lr, beta1=b1, beta2=b2, eps=eps, weight_decay=wd)
        return p, exp_avg, exp_avg_sq, count
    count = m.full((), float(step), device=p.device)
    with m.no_grad():
        p.mul_(1 - lr * wd)
        exp_avg.mul_(b1).add_(g, alpha=1 - b1)
        exp_avg_sq.mul_(b2).add_(g * g, alpha=1 - b2)
        denom = (exp_avg_sq / (1 - b2 ** step)).sqrt() + eps
        p.add_(exp_avg / (1 - b1 ** step) / denom, alpha=-lr)
    return p, exp_avg, exp_avg_sq, count


def sgd(nesterov=False, first=False, momentum=0.9):
    """One SGD step with weight decay (dygrad: the fused op, in place; with momentum its buffer's 0-d bool flag says
    whether the buffer has had its first step; torch: torch.optim.SGD's single-tensor formula), returning the param
    and the buffer. `first`: the buffer's first step (torch's buf = d_p.clone()), with maximize."""
    lr, dampening, wd, maximize = 0.1, 0.0 if nesterov else 0.25, 0.05, first

    def call(m, p, g, *buf):
        if m.__name__ == "dygrad":
            flags = [m.tensor(not first, dtype=m.bool, device=p.device)] if buf else []
            m.sgd_step([p], [g], list(buf), flags, lr=lr, momentum=momentum, dampening=dampening, weight_decay=wd,
                       nesterov=nesterov, maximize=maximize)
            return (p, *buf)
        with m.no_grad():
            d = (-g if maximize else g).add(p, alpha=wd)
            if buf:
                if first:
                    buf[0].copy_(d)
                else:
                    buf[0].mul_(momentum).add_(d, alpha=1 - dampening)
                d = d.add(buf[0], alpha=momentum) if nesterov else buf[0]
            p.add_(d, alpha=-lr)
        return (p, *buf)
    return call


def grad_norm(norm_type):
    """clip_grad_norm_'s total norm of three tensors (dygrad: one grad_norm Task; torch: get_total_norm)."""
    def call(m, a, b, c):
        if m.__name__ == "dygrad":
            return m._C._grad_norm([a, b, c], norm_type)
        return m.nn.utils.get_total_norm([a, b, c], norm_type)
    return call


def clip_grads(m, g1, g2, norm):
    """Two gradients scaled in place by min(1, 0.5 / (norm + 1e-6)) (dygrad: one clip_grads_with_norm Task)."""
    if m.__name__ == "dygrad":
        m._C._clip_grads_with_norm_([g1, g2], 0.5, norm)
    else:
        factor = m.clamp(0.5 / (norm + 1e-6), max=1.0)
        g1.mul_(factor)
        g2.mul_(factor)
    return g1, g2


GRADS = (Input((4, 5)), Input((7,)), Input((3, 2, 2)))
GRADS_BIG = (Input((300, 200)), Input((70000,)), Input((5,)))
# the clipped gradients are written in place by the fused Task only when contiguous (else an elementwise mul_)
CLIPPED = (Input((4, 5), layout=False), Input((9,), layout=False), Input((), low=0.1, high=3.0, layout=False))


def sdpa(**kw):
    return lambda m, q, k, v: m.nn.functional.scaled_dot_product_attention(q, k, v, **kw)


ATTENTION_BACKWARD = ("scaled_dot_product_attention_backward",)
QKV = (Input((2, 2, 5, 4)), Input((2, 2, 6, 4)), Input((2, 2, 6, 4)))
QKV_BIG = (Input((2, 4, 96, 32)), Input((2, 4, 96, 32)), Input((2, 4, 96, 32)))
# rotary_attention: qkv [B, T, 3 heads D] (heads 2; D 4, big: D 64), cos and sin [T, D/2].
ROTARY_QKV = ((Input((2, 5, 24)), Input((5, 2), low=-1, high=1, grad=False), Input((5, 2), low=-1, high=1, grad=False)),)
ROTARY_QKV_BIG = (Input((2, 96, 384)), Input((96, 32), low=-1, high=1, grad=False),
                  Input((96, 32), low=-1, high=1, grad=False))

ENTRIES = [
    Entry("softmax", lambda m, x: (m.softmax(x, -1), m.softmax(x, 0)), also_runs=("softmax_backward",),
          cases=((Input((4, 6)),), (Input((2, 3, 5)),)), big=(Input((300, 400)),)),
    Entry("log_softmax", lambda m, x: (m.log_softmax(x, -1), m.log_softmax(x, 0)),
          also_runs=("log_softmax_backward",), cases=((Input((4, 6)),), (Input((2, 3, 5)),)), big=(Input((300, 400)),)),
    Entry("embedding", lambda m, i, w: m.nn.functional.embedding(i, w), also_runs=("embedding_backward",),
          cases=((Input((3, 4), "int64", 0, 7, "integers", grad=False), Input((7, 5))),
                 (Input((9,), "int32", 0, 7, "integers", grad=False), Input((7, 3)))),
          big=(Input((64, 128), "int64", 0, 1000, "integers", grad=False), Input((1000, 96))),
          dtypes=FLOATS),
    Entry("cross_entropy", lambda m, x, t: m.nn.functional.cross_entropy(x, t), also_runs=("cross_entropy_backward",),
          cases=((Input((5, 7)), Input((5,), "int64", 0, 7, "integers", grad=False)),
                 (Input((12, 3)), Input((12,), "int64", 0, 3, "integers", grad=False))),
          big=(Input((512, 300)), Input((512,), "int64", 0, 300, "integers", grad=False))),
    Entry("nll_loss", lambda m, x, t: m.nn.functional.nll_loss(x, t), also_runs=("nll_loss_backward",),
          cases=((Input((5, 7)), Input((5,), "int64", 0, 7, "integers", grad=False)),
                 (Input((2, 4, 3)), Input((2, 3), "int64", 0, 4, "integers", grad=False))),
          big=(Input((4096, 300)), Input((4096,), "int64", 0, 300, "integers", grad=False))),
    Entry("nll_loss", lambda m, x, t, w: m.nn.functional.nll_loss(x, t, weight=w, ignore_index=0, reduction="sum"),
          also_runs=("nll_loss_backward",), variant="weighted_sum",
          cases=((Input((6, 4)), Input((6,), "int64", 0, 4, "integers", grad=False),
                  Input((4,), low=0.5, high=2.0, grad=False)),),
          big=(Input((40000, 8)), Input((40000,), "int64", 0, 8, "integers", grad=False),
               Input((8,), low=0.5, high=2.0, grad=False))),
    Entry("nll_loss", lambda m, x, t: m.nn.functional.nll_loss(x, t, reduction="none"),
          also_runs=("nll_loss_backward",), variant="none",
          cases=((Input((2, 5, 3)), Input((2, 3), "int64", 0, 5, "integers", grad=False)),),
          big=(Input((40000, 8)), Input((40000,), "int64", 0, 8, "integers", grad=False))),
    Entry("rms_norm", lambda m, x, w: m.rms_norm(x, w, eps=1e-6), also_runs=("rms_norm_backward",),
          ref=lambda torch, x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps=1e-6),
          cases=((Input((3, 8)), Input((8,))), (Input((2, 3, 5)), Input((5,)))),
          big=(Input((256, 512)), Input((512,)))),
    # a linear layer after the norm saves the norm's output: the backward recomputes it (rms_norm_apply, from the
    # norm's rstd; docs/autograd.md "Rematerialized saves")
    Entry("rms_norm", lambda m, x, w, l: m.nn.functional.linear(m.rms_norm(x, w, eps=1e-6), l), variant="then_linear",
          also_runs=("rms_norm_backward", "rms_norm_apply"),
          ref=lambda torch, x, w, l: torch.nn.functional.linear(torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps=1e-6), l),
          cases=((Input((3, 8)), Input((8,)), Input((5, 8))), (Input((2, 3, 5)), Input((5,)), Input((4, 5)))),
          big=(Input((256, 512)), Input((512,)), Input((64, 512))),
          tolerance={"float32": (2e-5, 1e-4), "bfloat16": (2e-2, 3e-2), "float16": (3e-3, 3e-3)}),  # matmul's
    Entry("rotary_position_embedding", lambda m, x, c, s: m.rotary_position_embedding(x, c, s),
          ref=rope_reference(True), also_runs=("rotary_position_embedding_backward",),
          cases=((Input((2, 3, 5, 8)), Input((5, 4), low=-1, high=1, grad=False), Input((5, 4), low=-1, high=1, grad=False)),),
          big=(Input((4, 8, 64, 64)), Input((64, 32), low=-1, high=1, grad=False),
               Input((64, 32), low=-1, high=1, grad=False))),
    Entry("rotary_position_embedding", lambda m, x, c, s: m.rotary_position_embedding(x, c, s, mode="rotate_half"),
          ref=rope_reference(False), also_runs=("rotary_position_embedding_backward",), variant="rotate_half",
          cases=((Input((2, 3, 5, 8)), Input((5, 4), low=-1, high=1, grad=False), Input((5, 4), low=-1, high=1, grad=False)),),
          big=(Input((4, 8, 64, 64)), Input((64, 32), low=-1, high=1, grad=False),
               Input((64, 32), low=-1, high=1, grad=False))),
    Entry("swiglu", lambda m, g, u: m.swiglu(g, u), ref=lambda torch, g, u: torch.nn.functional.silu(g) * u,
          also_runs=("swiglu_backward",), cases=((Input((4, 6)), Input((4, 6))), (Input((2, 3, 5)), Input((2, 3, 5)))),  # no broadcasting
          big=(Input((256, 320)), Input((256, 320)))),
    Entry("swiglu_packed", lambda m, x: m.swiglu(x), also_runs=("swiglu_backward",),
          ref=lambda torch, x: torch.nn.functional.silu(x[..., : x.shape[-1] // 2]) * x[..., x.shape[-1] // 2:],
          cases=((Input((4, 8)),), (Input((2, 3, 6)),)), big=(Input((256, 640)),)),
    Entry("adamw_step", adamw, differentiable=False, inplace_call=adamw,
          # adamw_step requires contiguous parameters and states (a ValueError otherwise)
          cases=((Input((4, 5), layout=False), Input((4, 5)), Input((4, 5), layout=False),
                  Input((4, 5), low=0.0, high=1.0, layout=False)),),
          big=(Input((256, 320), layout=False), Input((256, 320)), Input((256, 320), layout=False),
               Input((256, 320), low=0.0, high=1.0, layout=False))),
    # sgd_step requires contiguous parameters and buffers (a ValueError otherwise); the gradient may be strided
    Entry("sgd_step", sgd(), differentiable=False, inplace_call=sgd(), variant="momentum",
          cases=((Input((4, 5), layout=False), Input((4, 5)), Input((4, 5), layout=False)),),
          big=(Input((256, 320), layout=False), Input((256, 320)), Input((256, 320), layout=False))),
    Entry("sgd_step", sgd(nesterov=True, first=True), differentiable=False, inplace_call=sgd(nesterov=True, first=True),
          variant="nesterov-first-step",
          cases=((Input((4, 5), layout=False), Input((4, 5)), Input((4, 5), layout=False)),),
          big=(Input((256, 320), layout=False), Input((256, 320)), Input((256, 320), layout=False))),
    Entry("sgd_step", sgd(momentum=0), differentiable=False, inplace_call=sgd(momentum=0), variant="plain",
          cases=((Input((4, 5), layout=False), Input((4, 5))),),
          big=(Input((256, 320), layout=False), Input((256, 320)))),
    Entry("grad_norm", grad_norm(2.0), differentiable=False, cases=(GRADS,), big=GRADS_BIG),
    Entry("grad_norm", grad_norm(float("inf")), differentiable=False, cases=(GRADS,), big=GRADS_BIG, variant="inf"),
    Entry("grad_norm", grad_norm(1.5), differentiable=False, cases=(GRADS,), big=GRADS_BIG, variant="p=1.5"),
    Entry("clip_grads_with_norm", clip_grads, differentiable=False, inplace_call=clip_grads, cases=(CLIPPED,),
          big=(Input((300, 200), layout=False), Input((70000,), layout=False), Input((), low=0.1, high=3.0, layout=False))),
    Entry("rotary_attention", **rotary_attention(2, "interleaved", True), also_runs=("rotary_attention_backward",),
          variant="causal", cases=ROTARY_QKV, big=ROTARY_QKV_BIG),
    Entry("rotary_attention", **rotary_attention(3, "rotate_half", False), also_runs=("rotary_attention_backward",),
          variant="rotate_half", cases=((Input((2, 5, 54)), Input((5, 3), low=-1, high=1, grad=False),
                                         Input((5, 3), low=-1, high=1, grad=False)),)),
    Entry("scaled_dot_product_attention", sdpa(), also_runs=ATTENTION_BACKWARD, cases=(QKV,), big=QKV_BIG),
    Entry("scaled_dot_product_attention", sdpa(is_causal=True), also_runs=ATTENTION_BACKWARD, variant="causal",
          cases=(QKV,), big=QKV_BIG),
    Entry("scaled_dot_product_attention",
          lambda m, q, k, v, mask: m.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3),
          also_runs=ATTENTION_BACKWARD, variant="bool_mask",
          cases=(QKV + (Input((5, 6), kind="mask", high=0.7, grad=False),),)),
    Entry("matmul", lambda m, a, b: m.matmul(a, b),
          cases=((Input((3, 4)), Input((4, 5))), (Input((2, 3, 4)), Input((4, 2))), (Input((2, 1, 3, 4)), Input((3, 4, 2))),
                 (Input((4,)), Input((4, 3))), (Input((3, 4)), Input((4,)))),
          # the big case sums K = 256 products of magnitude ~1: float32 rounding reaches ~sqrt(K) eps sum|a b| ~ 1e-5
          big=(Input((192, 256)), Input((256, 160))),
          tolerance={"float32": (2e-5, 1e-4), "bfloat16": (2e-2, 3e-2), "float16": (3e-3, 3e-3)}),
    # the convolutions of nn/conv.py (issue 41): an im2col of strided slices, one matmul per group
    Entry("matmul", lambda m, x, w, b: m.nn.functional.conv1d(x, w, b, stride=2, padding=2, dilation=2, groups=2),
          variant="conv1d", dtypes=("float32", "float64"),
          cases=((Input((2, 4, 9)), Input((6, 2, 3)), Input((6,))),)),
    Entry("matmul", lambda m, x, w: m.nn.functional.conv2d(x, w, padding="same"), variant="conv2d",
          dtypes=("float32", "float64"), cases=((Input((2, 3, 5, 4)), Input((4, 3, 3, 2))),)),
    Entry("matmul", lambda m, x, w, b: m.nn.functional.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
          variant="conv_transpose2d", dtypes=("float32", "float64"),
          cases=((Input((2, 3, 3, 4)), Input((3, 2, 3, 3)), Input((2,))),)),
    # addmm (ops/linalg.cpp): beta * input + alpha * the product in one GEMM Task; baddbmm and addbmm run it too
    Entry("addmm", lambda m, c, a, b: m.addmm(c, a, b, beta=0.5, alpha=-2.0),
          cases=((Input((5,)), Input((3, 4)), Input((4, 5))), (Input((3, 5)), Input((3, 4)), Input((4, 5))),
                 (Input((3, 1)), Input((3, 0)), Input((0, 1)))),
          big=(Input((192, 160)), Input((192, 256)), Input((256, 160))),
          tolerance={"float32": (2e-5, 1e-4), "bfloat16": (2e-2, 3e-2), "float16": (3e-3, 3e-3)}),
    Entry("addmm", lambda m, c, a, b: m.addmm(c, a, b, beta=2, alpha=-3), variant="integer", dtypes=("int64", "int32"),
          cases=((Input((5,)), Input((3, 4)), Input((4, 5))),), big=(Input((192, 160)), Input((192, 256)), Input((256, 160)))),
    Entry("addmm", lambda m, c, a, b: (m.baddbmm(c, a, b, alpha=1.5), m.baddbmm(c, a, b, beta=0)), variant="baddbmm",
          cases=((Input((2, 1, 5)), Input((2, 3, 4)), Input((2, 4, 5))),),
          big=(Input((4, 96, 80)), Input((4, 96, 128)), Input((4, 128, 80))),
          tolerance={"float32": (2e-5, 1e-4), "bfloat16": (2e-2, 3e-2), "float16": (3e-3, 3e-3)}),
    Entry("addmm", lambda m, c, a, b: m.addbmm(c, a, b, beta=2), variant="addbmm",
          cases=((Input((3, 5)), Input((2, 3, 4)), Input((2, 4, 5))),),
          tolerance={"float32": (2e-5, 1e-4), "bfloat16": (2e-2, 3e-2), "float16": (3e-3, 3e-3)}),
]
