"""The ops that have no CUDA kernel yet (docs/cuda.md, "Kernels"), exactly as the kernel registry reports them when the
CUDA plugin is built: tests/python/test_cuda.py fails when an op on the list gains a kernel (take it off) and when an
op off the list has none. The list only shrinks."""
WITHOUT_CUDA_KERNEL = [
    '_deferred_failure', 'addmm', 'arange', 'argmax', 'argmin', 'atan2', 'bernoulli', 'bernoulli_mask',
    'bitwise_left_shift', 'bitwise_left_shift_scalar', 'bitwise_right_shift', 'bitwise_right_shift_scalar', 'cat',
    'clamp_tensor', 'clip_grads_with_norm', 'comm_start', 'comm_wait', 'cross_entropy', 'cross_entropy_backward',
    'cumprod', 'cumprod_backward', 'cumsum', 'embedding_backward', 'extremum_backward', 'extremum_index_backward',
    'flip', 'fmod', 'grad_norm', 'index', 'index_add', 'index_put', 'jit_fused', 'jit_graph', 'jit_segment', 'lerp',
    'linspace', 'log_softmax_backward', 'logsumexp', 'logsumexp_backward', 'matmul', 'max_dim', 'min_dim',
    'multinomial', 'nll_loss', 'nll_loss_backward', 'nonzero', 'rand', 'randint', 'randn', 'record_time', 'remainder',
    'repeat_interleave', 'rms_norm_backward', 'rotary_attention', 'rotary_attention_backward', 'round',
    'scaled_dot_product_attention', 'scaled_dot_product_attention_backward', 'scatter', 'scatter_add', 'scatter_value',
    'sgd_step', 'softmax_backward', 'sort', 'std', 'topk', 'tril', 'triu', 'var'
]
