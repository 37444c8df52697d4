"""torch._dynamo: the decorators and queries libraries import from it (disable, allow_in_graph,
assume_constant_result, is_compiling, reset, config, explain), with torch.compiler's meaning on dygrad.jit
(docs/jit.md)."""
import types

from ..compiler import allow_in_graph, assume_constant_result, disable, is_compiling, reset  # noqa: F401


def mark_static_address(tensor, guard=True):
    """A hint for compiled graphs: nothing to do eagerly."""


def mark_dynamic(tensor, index, *, min=None, max=None, specialize_on=None):  # noqa: A002 (torch's names)
    """dygrad.jit.mark_dynamic: the dim's size is symbolic in compiled functions (docs/jit.md, "Symbolic shapes")."""
    from ..jit import mark_dynamic as mark
    mark(tensor, index)


def explain(f, *args, **kwargs):
    """torch._dynamo.explain(f)(*args): dygrad.jit.explain."""
    from ..jit import explain as run
    return lambda *a, **k: run(f, *a, **k) if not args and not kwargs else run(f, *args, **kwargs)


def maybe_mark_dynamic(tensor, index):
    """torch's softer mark_dynamic: dygrad's marks never raise when a dim specialises, so it is mark_dynamic."""
    from ..jit import mark_dynamic as mark
    mark(tensor, index)


# torch._dynamo.config: libraries read and set a few fields (cache sizes, suppress_errors).
config = types.SimpleNamespace(cache_size_limit=8, accumulated_cache_size_limit=256, suppress_errors=False,
                               capture_scalar_outputs=False, capture_dynamic_output_shape_ops=False,
                               optimize_ddp=True, recompile_limit=8)
