"""torch._dynamo: the decorators and queries libraries import from it (disable, allow_in_graph, is_compiling,
reset, config), with torch.compiler's meaning: dygrad compiles nothing yet, so they return what they decorate."""
import types

from ..compiler import allow_in_graph, disable, is_compiling, reset  # noqa: F401


def mark_static_address(tensor, guard=True):
    """A hint for compiled graphs: nothing to do eagerly."""


def mark_dynamic(tensor, index, *, min=None, max=None, specialize_on=None):  # noqa: A002 (torch's names)
    """A hint for compiled graphs: nothing to do eagerly."""


def maybe_mark_dynamic(tensor, index):
    """A hint for compiled graphs: nothing to do eagerly."""


# torch._dynamo.config: libraries read and set a few fields (cache sizes, suppress_errors).
config = types.SimpleNamespace(cache_size_limit=8, accumulated_cache_size_limit=256, suppress_errors=False,
                               capture_scalar_outputs=False, capture_dynamic_output_shape_ops=False,
                               optimize_ddp=True, recompile_limit=8)
