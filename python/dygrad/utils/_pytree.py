"""torch.utils._pytree: flattening nested containers (lists, tuples, namedtuples, dicts, OrderedDicts,
defaultdicts, deques and registered classes) into leaves and a TreeSpec, and mapping functions over the leaves.
Same functions, node types and leaf order as torch 2.13's (None is a leaf there, and here)."""
import collections
import dataclasses
from typing import Any, Callable, NamedTuple, Optional

__all__ = ["TreeSpec", "LeafSpec", "register_pytree_node", "tree_flatten", "tree_unflatten", "tree_leaves",
           "tree_structure", "tree_map", "tree_map_", "tree_map_only", "tree_iter", "tree_all", "tree_any",
           "tree_all_only", "tree_any_only", "is_namedtuple", "SUPPORTED_NODES", "tree_flatten_with_path",
           "tree_leaves_with_path", "keystr", "MappingKey", "SequenceKey", "GetAttrKey"]


class NodeDef(NamedTuple):
    type: type
    flatten_fn: Callable   # node -> (children, context)
    unflatten_fn: Callable  # (children, context) -> node
    flatten_with_keys_fn: Optional[Callable] = None  # node -> ([(key, child)], context)


SUPPORTED_NODES = {}


# The key of a child within its node, as torch names them: a leaf's path is the tuple of keys from the root.
@dataclasses.dataclass(frozen=True, slots=True)
class MappingKey:
    key: Any

    def __str__(self):
        return f"[{self.key!r}]"

    def get(self, mapping):
        return mapping[self.key]


@dataclasses.dataclass(frozen=True, slots=True)
class SequenceKey:
    idx: int

    def __str__(self):
        return f"[{self.idx!r}]"

    def get(self, sequence):
        return sequence[self.idx]


@dataclasses.dataclass(frozen=True, slots=True)
class GetAttrKey:
    name: str

    def __str__(self):
        return f".{self.name}"

    def get(self, obj):
        return getattr(obj, self.name)


def keystr(kp):
    """A key path printed: (MappingKey('a'), SequenceKey(0)) -> "['a'][0]"."""
    return "".join(str(k) for k in kp)


def register_pytree_node(cls, flatten_fn, unflatten_fn, *, serialized_type_name=None, to_dumpable_context=None,
                         from_dumpable_context=None, flatten_with_keys_fn=None):
    """Makes instances of `cls` nodes: flatten_fn(node) -> (children, context), unflatten_fn(children, context);
    flatten_with_keys_fn(node) -> ([(key, child)], context) gives the leaves' paths (tree_flatten_with_path)."""
    if cls in SUPPORTED_NODES:
        raise ValueError(f"{cls} is already registered as pytree node.")
    SUPPORTED_NODES[cls] = NodeDef(cls, flatten_fn, unflatten_fn, flatten_with_keys_fn)


def is_namedtuple(obj):
    cls = obj if isinstance(obj, type) else type(obj)
    return issubclass(cls, tuple) and hasattr(cls, "_fields") and hasattr(cls, "_make")


def _dict_flatten(d):
    return list(d.values()), list(d.keys())


def _dict_flatten_with_keys(d):
    values, keys = _dict_flatten(d)
    return [(MappingKey(k), v) for k, v in zip(keys, values)], keys


def _sequence_flatten_with_keys(flatten_fn):
    def flatten_with_keys(node):
        children, context = flatten_fn(node)
        return [(SequenceKey(i), c) for i, c in enumerate(children)], context
    return flatten_with_keys


def _defaultdict_flatten(d):
    return list(d.values()), (d.default_factory, list(d.keys()))


def _defaultdict_flatten_with_keys(d):
    values, context = _defaultdict_flatten(d)
    return [(MappingKey(k), v) for k, v in zip(context[1], values)], context


def _sequence_node(cls, flatten_fn, unflatten_fn):
    register_pytree_node(cls, flatten_fn, unflatten_fn, flatten_with_keys_fn=_sequence_flatten_with_keys(flatten_fn))


_sequence_node(list, lambda x: (list(x), None), lambda children, _: list(children))
_sequence_node(tuple, lambda x: (list(x), None), lambda children, _: tuple(children))
register_pytree_node(dict, _dict_flatten, lambda children, keys: dict(zip(keys, children)),
                     flatten_with_keys_fn=_dict_flatten_with_keys)
register_pytree_node(collections.OrderedDict, _dict_flatten,
                     lambda children, keys: collections.OrderedDict(zip(keys, children)),
                     flatten_with_keys_fn=_dict_flatten_with_keys)
register_pytree_node(collections.defaultdict, _defaultdict_flatten,
                     lambda children, c: collections.defaultdict(c[0], zip(c[1], children)),
                     flatten_with_keys_fn=_defaultdict_flatten_with_keys)
_sequence_node(collections.deque, lambda d: (list(d), d.maxlen),
               lambda children, maxlen: collections.deque(children, maxlen=maxlen))


def _node_def(tree):
    cls = type(tree)
    if cls in SUPPORTED_NODES:
        return SUPPORTED_NODES[cls]
    if is_namedtuple(cls):
        return NodeDef(cls, lambda x: (list(x), cls), lambda children, c: c._make(children),
                       lambda x: ([(GetAttrKey(f), v) for f, v in zip(cls._fields, x)], cls))
    return None


class TreeSpec:
    """The structure of a pytree: its node type, the node's context (dict keys, namedtuple class ...) and the
    specs of its children; a leaf's spec is a LeafSpec."""

    def __init__(self, type, context, children_specs):  # noqa: A002 (torch's argument name)
        self.type, self.context, self.children_specs = type, context, list(children_specs)
        self.num_children = len(self.children_specs)
        self.num_leaves = sum(c.num_leaves for c in self.children_specs)
        self.num_nodes = 1 + sum(c.num_nodes for c in self.children_specs)

    def is_leaf(self):
        return False

    def __eq__(self, other):
        return (isinstance(other, TreeSpec) and other.is_leaf() == self.is_leaf() and other.type == self.type and
                other.context == self.context and other.children_specs == self.children_specs)

    def __hash__(self):
        return hash((self.type, self.num_leaves, self.num_nodes))

    def __repr__(self):
        name = "namedtuple" if is_namedtuple(self.type) else getattr(self.type, "__name__", str(self.type))
        return f"TreeSpec({name}, {self.context!r}, [{', '.join(map(repr, self.children_specs))}])"

    def unflatten(self, leaves):
        return tree_unflatten(leaves, self)

    def flatten_up_to(self, tree):
        """The subtrees of `tree` at this spec's leaves (tree must have this structure down to them)."""
        out = []

        def walk(spec, node):
            if spec.is_leaf():
                out.append(node)
                return
            node_def = _node_def(node)
            if node_def is None or node_def.type is not spec.type:
                raise ValueError(f"Node type mismatch; expected {spec.type}, but got {type(node)}.")
            children, context = node_def.flatten_fn(node)
            if context != spec.context or len(children) != spec.num_children:
                raise ValueError(f"Node context mismatch for {spec.type.__name__}: expected {spec.context!r}, got "
                                 f"{context!r}")
            for child_spec, child in zip(spec.children_specs, children):
                walk(child_spec, child)

        walk(self, tree)
        return out


class LeafSpec(TreeSpec):
    def __init__(self):
        self.type, self.context, self.children_specs = None, None, []
        self.num_children, self.num_leaves, self.num_nodes = 0, 1, 1

    def is_leaf(self):
        return True

    def __repr__(self):
        return "*"


_LEAF = LeafSpec()


def tree_flatten(tree, is_leaf=None):
    """(leaves, spec): the leaves in depth-first, left-to-right order (dicts by insertion order)."""
    leaves = []

    def walk(node):
        node_def = None if is_leaf is not None and is_leaf(node) else _node_def(node)
        if node_def is None:
            leaves.append(node)
            return _LEAF
        children, context = node_def.flatten_fn(node)
        return TreeSpec(node_def.type, context, [walk(c) for c in children])

    spec = walk(tree)
    return leaves, spec


def tree_flatten_with_path(tree, is_leaf=None):
    """([(key path, leaf)], spec): tree_flatten's leaves, each with the keys that lead to it from the root."""
    paths = []

    def walk(path, node):
        node_def = None if is_leaf is not None and is_leaf(node) else _node_def(node)
        if node_def is None:
            paths.append((path, node))
            return
        if node_def.flatten_with_keys_fn is None:
            raise ValueError(f"Did not find a flatten_with_keys_fn for type: {node_def.type}. Please pass a "
                             "flatten_with_keys_fn argument to register_pytree_node.")
        for key, child in node_def.flatten_with_keys_fn(node)[0]:
            walk((*path, key), child)

    walk((), tree)
    return paths, tree_structure(tree, is_leaf)


def tree_leaves_with_path(tree, is_leaf=None):
    return tree_flatten_with_path(tree, is_leaf)[0]


def tree_unflatten(leaves, treespec):
    """The pytree of `treespec`'s structure holding `leaves` in order."""
    if not isinstance(treespec, TreeSpec):
        raise TypeError(f"tree_unflatten(leaves, treespec): Expected `treespec` to be instance of TreeSpec but got "
                        f"item of type {type(treespec)}.")
    leaves = list(leaves)
    if len(leaves) != treespec.num_leaves:
        raise ValueError(f"treespec.unflatten(leaves): `leaves` has length {len(leaves)} but the spec refers to a "
                         f"pytree that holds {treespec.num_leaves} items ({treespec}).")
    it = iter(leaves)

    def build(spec):
        if spec.is_leaf():
            return next(it)
        node_def = SUPPORTED_NODES.get(spec.type) or _node_def(_namedtuple_probe(spec))
        return node_def.unflatten_fn([build(c) for c in spec.children_specs], spec.context)

    return build(treespec)


def _namedtuple_probe(spec):
    if is_namedtuple(spec.type):
        return spec.type._make([None] * spec.num_children)
    raise ValueError(f"{spec.type} is not a registered pytree node")


def tree_leaves(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[0]


def tree_iter(tree, is_leaf=None):
    return iter(tree_leaves(tree, is_leaf))


def tree_structure(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[1]


def tree_map(func, tree, *rests, is_leaf=None):
    """The pytree of func(leaf, *corresponding leaves of rests); rests must have tree's structure (up to its
    leaves)."""
    leaves, spec = tree_flatten(tree, is_leaf)
    others = [spec.flatten_up_to(r) for r in rests]
    return tree_unflatten([func(*xs) for xs in zip(leaves, *others)], spec)


def tree_map_(func, tree, *rests, is_leaf=None):
    """Calls func on each leaf (with the corresponding leaves of rests) for its side effects; returns tree."""
    leaves, spec = tree_flatten(tree, is_leaf)
    others = [spec.flatten_up_to(r) for r in rests]
    for xs in zip(leaves, *others):
        func(*xs)
    return tree


def _only(type_or_types, func):
    def apply(x):
        return func(x) if isinstance(x, type_or_types) else x
    return apply


def tree_map_only(type_or_types, func, tree, is_leaf=None):
    """tree_map applying func only to leaves of the given type(s); other leaves are kept."""
    return tree_map(_only(type_or_types, func), tree, is_leaf=is_leaf)


def tree_all(pred, tree, is_leaf=None):
    return all(map(pred, tree_leaves(tree, is_leaf)))


def tree_any(pred, tree, is_leaf=None):
    return any(map(pred, tree_leaves(tree, is_leaf)))


def tree_all_only(type_or_types, pred, tree, is_leaf=None):
    return all(pred(x) for x in tree_leaves(tree, is_leaf) if isinstance(x, type_or_types))


def tree_any_only(type_or_types, pred, tree, is_leaf=None):
    return any(pred(x) for x in tree_leaves(tree, is_leaf) if isinstance(x, type_or_types))
