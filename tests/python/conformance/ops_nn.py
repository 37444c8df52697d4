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


def adamw(m, p, g, exp_avg, exp_avg_sq):
    """One AdamW step at step 3 (dygrad: the fused op, in place, its step count a 0-d float32 tensor that the Task
    increments from 2; torch: its formula), returning the states and the count."""
    lr, b1, b2, eps, wd, step = 1e-2, 0.8, 0.95, 1e-6, 0.1, 3
    if m.__name__ == "dygrad":
        count = m.full((), float(step - 1))
        m.adamw_step([p], [g], [exp_avg], [exp_avg_sq], [count], lr=lr, beta1=b1, beta2=b2, eps=eps, weight_decay=wd)
        return p, exp_avg, exp_avg_sq, count
    count = m.full((), float(step))
    with m.no_grad():
        p.mul_(1 - lr * wd)
        exp_avg.mul_(b1).add_(g, alpha=1 - b1)
        exp_avg_sq.mul_(b2).add_(g * g, alpha=1 - b2)
        denom = (exp_avg_sq / (1 - b2 ** step)).sqrt() + eps
        p.add_(exp_avg / (1 - b1 ** step) / denom, alpha=-lr)
    return p, exp_avg, exp_avg_sq, count


def sdpa(**kw):
    return lambda m, q, k, v: m.nn.functional.scaled_dot_product_attention(q, k, v, **kw)


ATTENTION_BACKWARD = ("scaled_dot_product_attention_backward",)
QKV = (Input((2, 2, 5, 4)), Input((2, 2, 6, 4)), Input((2, 2, 6, 4)))
QKV_BIG = (Input((2, 4, 96, 32)), Input((2, 4, 96, 32)), Input((2, 4, 96, 32)))

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
    Entry("rms_norm", lambda m, x, w: m.rms_norm(x, w, eps=1e-6), also_runs=("rms_norm_backward",),
          ref=lambda torch, x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps=1e-6),
          cases=((Input((3, 8)), Input((8,))), (Input((2, 3, 5)), Input((5,)))),
          big=(Input((256, 512)), Input((512,)))),
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
