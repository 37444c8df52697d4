"""dygrad.onnx's dynamic shapes (`dynamic_axes`, `dynamic_shapes`): the forward is lowered at several sizes of the
dynamic dims, the graphs are compared constant by constant, and each integer that changes with the sizes is fitted
as a polynomial of degree 2 in them and computed in the graph from the inputs' shapes (docs/onnx.md, "Dynamic
shapes"). A capture sees sizes, never the Python that computed them; samples tell them apart, as the JIT's symbolic
graphs do (docs/jit.md, "Symbolic shapes").

Notation: n symbols s_1 .. s_n (a dim name, one size at the example), d_k = +1 or -1 the step of s_k between samples.
"""
from fractions import Fraction

import numpy as np
from onnx import helper, numpy_helper

from .. import _C
from ..utils._pytree import tree_flatten, tree_unflatten
from ._export import assemble, input_names_for, lower
from .errors import OnnxExporterError

MAX_SYMBOLS = 4


def _dim_name(spec, fallback):
    if isinstance(spec, str):
        return spec
    return getattr(spec, "__name__", None) or fallback


def _marks(names, ranks, dynamic_axes, dynamic_shapes):
    """(tensor index, dim) -> symbol name, from torch's two spellings."""
    marks = {}
    for key, dims in (dynamic_axes or {}).items():
        if key not in names:
            continue  # an output's dims: they follow from the inputs'
        i = names.index(key)
        pairs = dims.items() if isinstance(dims, dict) else ((d, f"{key}_dynamic_axes_{k + 1}")
                                                              for k, d in enumerate(dims))
        for d, symbol in pairs:
            marks[(i, d % ranks[i])] = _dim_name(symbol, f"{key}_dim_{d}")
    if dynamic_shapes:
        specs = ([dynamic_shapes.get(n) for n in names] if isinstance(dynamic_shapes, dict)
                 else list(dynamic_shapes) + [None] * (len(names) - len(dynamic_shapes)))
        for i, spec in enumerate(specs[:len(names)]):
            pairs = spec.items() if isinstance(spec, dict) else enumerate(spec or ())
            for d, symbol in pairs:
                if symbol is not None:
                    marks[(i, d % ranks[i])] = _dim_name(symbol, f"{names[i]}_dim_{d}")
    return marks


def _exponents(n):
    """The monomials of degree <= 2 in n symbols, as exponent vectors: 1, s_k, s_k^2, s_k s_l. The sample points are
    the same vectors as multiples of the steps (s + m d): a unisolvent set for these monomials."""
    out = [tuple([0] * n)]
    for k in range(n):
        out.append(tuple(1 if j == k else 0 for j in range(n)))
        out.append(tuple(2 if j == k else 0 for j in range(n)))
    for k in range(n):
        for m in range(k + 1, n):
            out.append(tuple(1 if j in (k, m) else 0 for j in range(n)))
    return out


def _monomial(exponent, sizes):
    value = 1
    for e, s in zip(exponent, sizes):
        value *= s ** e
    return value


def _inverse(matrix):
    """The inverse of a square matrix of Fractions (Gauss-Jordan)."""
    n = len(matrix)
    rows = [list(map(Fraction, row)) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        p = rows[col][col]
        rows[col] = [x / p for x in rows[col]]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                f = rows[r][col]
                rows[r] = [x - f * y for x, y in zip(rows[r], rows[col])]
    return [row[n:] for row in rows]


def _resized(args, kwargs, marks_by_tensor, sizes):
    """The arguments with each dynamic dim cut or repeated (index modulo its size) to the point's size."""
    leaves, spec = tree_flatten((args, kwargs))
    index = 0
    for j, x in enumerate(leaves):
        if isinstance(x, _C.Tensor):
            for d, k in marks_by_tensor.get(index, ()):
                if x.shape[d] != sizes[k]:
                    x = x.index_select(d, _C.arange(sizes[k], dtype=_C.int64) % x.shape[d])
            leaves[j] = x.contiguous() if index in marks_by_tensor else x
            index += 1
    return tree_unflatten(leaves, spec)


def _node_key(node):
    return (node.op_type, tuple(node.input), tuple(node.output), tuple(a.SerializeToString() for a in node.attribute))


def lower_dynamic(model, args, kwargs, opset, input_names, output_names, default_names, dynamic_axes,
                  dynamic_shapes):
    tensors = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, _C.Tensor)]
    names = input_names_for(tensors, input_names, default_names)
    marks = _marks(names, [t.dim() for t in tensors], dynamic_axes, dynamic_shapes)
    symbols = list(dict.fromkeys(marks.values()))
    if not symbols:
        raise ValueError(f"[onnx.export] dynamic_axes/dynamic_shapes name no dim of the inputs {names}")
    if len(symbols) > MAX_SYMBOLS:
        raise ValueError(f"[onnx.export] {len(symbols)} dynamic dims; at most {MAX_SYMBOLS} distinct names")
    sizes0 = []
    for symbol in symbols:
        seen = {tensors[i].shape[d] for (i, d), s in marks.items() if s == symbol}
        if len(seen) != 1 or min(seen) < 2:
            raise ValueError(f"[onnx.export] dynamic dim '{symbol}' has the sizes {sorted(seen)} in the example; "
                             "it needs one size, at least 2 (sizes 0 and 1 specialise, as in torch)")
        sizes0.append(seen.pop())
    marks_by_tensor = {}
    for (i, d), symbol in marks.items():
        marks_by_tensor.setdefault(i, []).append((d, symbols.index(symbol)))
    steps = [-1 if s >= 6 else 1 for s in sizes0]
    exponents = _exponents(len(symbols))
    fit_points = [tuple(s + m * d for s, m, d in zip(sizes0, e, steps)) for e in exponents]
    check_point = tuple(s + (3 + k % 2) * d for k, (s, d) in enumerate(zip(sizes0, steps)))
    inverse = _inverse([[_monomial(e, p) for e in exponents] for p in fit_points])

    samples = []
    for point in fit_points + [check_point]:
        a, kw = _resized(args, kwargs, marks_by_tensor, point) if point != tuple(sizes0) else (args, kwargs)
        try:
            samples.append(lower(model, a, kw, opset, input_names, output_names, default_names, dedupe=False))
        except OnnxExporterError:
            raise
        except Exception as e:
            raise OnnxExporterError(f"[onnx.export] dynamic shapes: the forward at sizes "
                                    f"{dict(zip(symbols, point))} raised {type(e).__name__}: {e}") from e

    def where(name, lowered):
        for node in lowered.builder.nodes:
            if name in node.input:
                return node.doc_string
        return "a graph output"

    def fit(values, what):
        """The coefficients of `values` (one per fit point, then the check point), exact integers, or raises."""
        coefficients = [sum(row[j] * values[j] for j in range(len(fit_points))) for row in inverse]
        if any(c.denominator != 1 for c in coefficients) or sum(
                c * _monomial(e, check_point) for c, e in zip(coefficients, exponents)) != values[-1]:
            raise OnnxExporterError(
                f"[onnx.export] dynamic shapes: {what} is no polynomial of degree <= 2 with integer coefficients in "
                f"the dynamic dims {symbols} (its values at the sampled sizes: {values})")
        return tuple(int(c) for c in coefficients)

    first = samples[0]
    base_nodes = [_node_key(n) for n in first.builder.nodes]
    for sample, point in zip(samples[1:], fit_points[1:] + [check_point]):
        other = [_node_key(n) for n in sample.builder.nodes]
        if other != base_nodes:
            at = next((i for i, (x, y) in enumerate(zip(base_nodes, other)) if x != y),
                      min(len(other), len(base_nodes)))
            node = (first.builder.nodes + [None])[at]
            raise OnnxExporterError(
                f"[onnx.export] dynamic shapes: the forward issues other ops at sizes {dict(zip(symbols, point))} "
                f"than at {dict(zip(symbols, sizes0))} (from {node.doc_string if node else 'the end'}): Python chose "
                "its ops by the sizes; export once per shape")

    b = first.builder
    per_sample = [{t.name: t for t in s.builder.initializers} for s in samples]
    fitted = {}
    for name in sorted(b.constant_names):
        arrays = [numpy_helper.to_array(s[name]) for s in per_sample]
        if all(np.array_equal(arrays[0], a) for a in arrays[1:]):
            continue
        if arrays[0].dtype != np.int64 or arrays[0].ndim > 1 or any(a.shape != arrays[0].shape for a in arrays):
            raise OnnxExporterError(f"[onnx.export] dynamic shapes: a constant of {where(name, first)} depends on "
                                    "the dynamic sizes in a way the exporter cannot compute in the graph")
        flat = [a.reshape(-1) for a in arrays]
        fitted[name] = (arrays[0].ndim, [fit([int(f[j]) for f in flat], f"an integer of {where(name, first)}")
                                         for j in range(flat[0].size)])

    # Each fitted constant becomes nodes computing it from the inputs' shapes, placed first in the graph.
    start = len(b.nodes)
    b.site = "dynamic shapes: an integer computed from the inputs' dims"
    symbol_tensors, expressions = {}, {}

    def symbol_tensor(k):
        if k not in symbol_tensors:
            i, d = next((i, d) for (i, d), s in marks.items() if s == symbols[k])
            symbol_tensors[k] = b.node("Shape", [names[i]], start=d, end=d + 1)
        return symbol_tensors[k]

    def expression(coefficients):
        if coefficients not in expressions:
            total = None
            for c, e in zip(coefficients, exponents):
                if c == 0 or not any(e):
                    continue
                term = None
                for k, power in enumerate(e):
                    for _ in range(power):
                        term = symbol_tensor(k) if term is None else b.node("Mul", [term, symbol_tensor(k)])
                if c != 1:
                    term = b.node("Mul", [term, b.constant(np.asarray([c], np.int64), "coefficient")])
                total = term if total is None else b.node("Add", [total, term])
            if coefficients[0] != 0 or total is None:
                constant = b.constant(np.asarray([coefficients[0]], np.int64), "coefficient")
                total = constant if total is None else b.node("Add", [total, constant])
            expressions[coefficients] = total
        return expressions[coefficients]

    for name, (ndim, elements) in fitted.items():
        parts = [expression(c) for c in elements]
        if ndim == 0:
            b.nodes.append(helper.make_node("Reshape", [parts[0], b.constant(np.zeros(0, np.int64), "scalar_shape")],
                                            [name], name=b.fresh("node_Reshape"), doc_string=b.site))
        else:
            b.nodes.append(helper.make_node("Concat", parts, [name], axis=0, name=b.fresh("node_Concat"),
                                            doc_string=b.site))
    b.initializers = [t for t in b.initializers if t.name not in fitted]
    b.nodes = b.nodes[start:] + b.nodes[:start]

    input_dims = [[marks.get((i, d), size) for d, size in enumerate(shape)]
                  for i, (shape, _) in enumerate(first.inputs)]
    output_dims = []
    for k, (shape, _) in enumerate(first.outputs):
        dims = []
        for d, size in enumerate(shape):
            c = fit([s.outputs[k][0][d] for s in samples], f"dim {d} of output {first.output_names[k]}")
            plain = [j for j, e in enumerate(exponents) if c[j] != 0]
            if not any(exponents[j] != exponents[0] for j in plain):
                dims.append(size)
            elif len(plain) == 1 and c[plain[0]] == 1 and sum(exponents[plain[0]]) == 1:
                dims.append(symbols[exponents[plain[0]].index(1)])
            else:
                dims.append(None)
        output_dims.append(dims)
    return assemble(first, model, opset, input_dims, output_dims)
