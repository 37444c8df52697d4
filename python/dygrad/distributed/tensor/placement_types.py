"""torch.distributed.tensor.placement_types: how a tensor is laid out over one dimension of a device mesh.

The placements are descriptions (values with torch's fields, equality, hash and printing), so libraries can build
their sharding plans at import (transformers' tensor-parallel styles); what would apply one, a DTensor, is a
stand-in until dygrad shards tensors (issue "Distributed (2 of 2)")."""


class Placement:
    """The base of the placements."""

    def is_shard(self, dim=None):
        return False

    def is_replicate(self):
        return False

    def is_partial(self, reduce_op=None):
        return False


class Shard(Placement):
    """Split along tensor dimension `dim` into chunks as torch.chunk splits (the last ones may be short)."""
    __slots__ = ("dim",)

    def __init__(self, dim=0):
        self.dim = dim

    def is_shard(self, dim=None):
        return dim is None or dim == self.dim

    @staticmethod
    def local_shard_size_and_offset(curr_local_size, num_chunks, rank):
        """(size, offset) of chunk `rank` of `num_chunks` over a dimension of `curr_local_size`, as torch.chunk."""
        if curr_local_size % num_chunks == 0:
            full_chunk_size = curr_local_size // num_chunks
            return full_chunk_size, full_chunk_size * rank
        full_chunk_size = (curr_local_size + num_chunks - 1) // num_chunks
        start = full_chunk_size * rank
        return max(0, min(curr_local_size, start + full_chunk_size) - start), min(curr_local_size, start)

    def _local_shard_size_and_offset(self, curr_local_size, num_chunks, rank):
        return Shard.local_shard_size_and_offset(curr_local_size, num_chunks, rank)

    def __eq__(self, other):
        return type(other) is type(self) and other.dim == self.dim

    def __hash__(self):
        return hash(self.dim)

    def __repr__(self):
        return f"Shard(dim={self.dim})"

    def __str__(self):
        return f"S({self.dim})"


class _StridedShard(Placement):
    """Shard `dim` in `split_factor` interleaved groups (what FSDP over tensor parallelism produces)."""
    __slots__ = ("dim", "split_factor")

    def __init__(self, dim, split_factor):
        self.dim, self.split_factor = dim, split_factor

    def __eq__(self, other):
        return type(other) is type(self) and (other.dim, other.split_factor) == (self.dim, self.split_factor)

    def __hash__(self):
        return hash((self.dim, self.split_factor))

    def __repr__(self):
        return f"_StridedShard(dim={self.dim}, sf={self.split_factor})"

    def __str__(self):
        return f"_S({self.dim}, {self.split_factor})"


class Replicate(Placement):
    """Every rank holds the whole tensor."""

    def is_replicate(self):
        return True

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __hash__(self):
        return -1

    def __repr__(self):
        return "Replicate()"

    def __str__(self):
        return "R"


class Partial(Placement):
    """Every rank holds a partial value; the tensor is their reduction by `reduce_op`."""
    __slots__ = ("reduce_op",)

    def __init__(self, reduce_op="sum"):
        self.reduce_op = reduce_op

    def is_partial(self, reduce_op=None):
        return reduce_op is None or reduce_op == self.reduce_op

    def __eq__(self, other):
        return isinstance(other, Partial) and other.reduce_op == self.reduce_op

    def __hash__(self):
        return 1 + hash(self.reduce_op)

    def __repr__(self):
        return f"Partial({self.reduce_op})"

    def __str__(self):
        return f"P({self.reduce_op})"
