"""What Hugging Face transformers reaches beyond the names of issues 37 and 41 (tests/python/test_transformers.py
runs it), each against torch 2.13: view(dtype), storages (untyped_storage, UntypedStorage.from_file, asarray of
a storage: how safetensors loads), layouts, the default dtype, `with torch.device("meta")`, modules' extra state,
the dtypes dygrad names without storage, pytree key paths, DTensor placements, and the small names of
torch.distributed, torch._dynamo, torch.cuda and flex attention."""
import collections
import pickle

import numpy as np
import pytest
import torch
import torch.utils._pytree as torch_pytree

import dygrad as dg
import dygrad.utils._pytree as dg_pytree

Point = collections.namedtuple("Point", "x y")
TREES = [[1, (2, None), {"b": 3, "a": 4}], {"x": [1, 2], "y": (3,)}, Point(1, [2, 3]),
         collections.OrderedDict(a=1, b=[2]), collections.defaultdict(list, {"k": [5]}), collections.deque([1, 2]), 7]


@pytest.mark.parametrize("tree", TREES, ids=repr)
def test_pytree_key_paths_match_torch(tree):
    ours, spec = dg_pytree.tree_flatten_with_path(tree)
    theirs, _ = torch_pytree.tree_flatten_with_path(tree)
    assert [(dg_pytree.keystr(k), v) for k, v in ours] == [(torch_pytree.keystr(k), v) for k, v in theirs]
    assert [type(k).__name__ for path, _ in ours for k in path] == \
        [type(k).__name__ for path, _ in theirs for k in path]
    assert spec == dg_pytree.tree_structure(tree) and dg_pytree.tree_leaves_with_path(tree) == ours
    for path, leaf in ours:
        node = tree
        for key in path:
            node = key.get(node)
        assert node == leaf


def test_pytree_registered_node_with_keys():
    class Box:
        def __init__(self, v):
            self.v = v

    dg_pytree.register_pytree_node(Box, lambda b: ([b.v], None), lambda c, _: Box(c[0]),
                                   flatten_with_keys_fn=lambda b: ([(dg_pytree.GetAttrKey("v"), b.v)], None))
    assert dg_pytree.keystr(dg_pytree.tree_flatten_with_path([Box(3)])[0][0][0]) == "[0].v"

    class Bare:
        pass

    dg_pytree.register_pytree_node(Bare, lambda b: ([], None), lambda c, _: Bare())
    with pytest.raises(ValueError, match="Did not find a flatten_with_keys_fn"):
        dg_pytree.tree_flatten_with_path(Bare())


