"""torch._dynamo._trace_wrapped_higher_order_op: TransformGetItemToIndex, the torch-function mode libraries enter
around vmap (transformers' custom attention masks). dygrad has neither torch-function modes nor vmap: the name
imports, and entering it raises NotProvidedError."""
from .._not_provided import stand_in

TransformGetItemToIndex = stand_in("TransformGetItemToIndex", __name__, "no torch function modes or vmap yet")
