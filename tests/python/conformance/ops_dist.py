"""Conformance entries of the communication Tasks (distributed/comm.cpp): comm_start and comm_wait, run through a
process group of one (no MPI), where every collective returns its input. Several ranks: test_distributed.py."""
from .spec import FLOATS, INTEGERS, Entry, Input


def all_reduce_alone(m, x):
    """all_reduce over a group of one: the tensor comes back unchanged, through both Tasks."""
    import dygrad.distributed as dist
    y = x.detach().clone()
    dist.all_reduce(y, group=dist._single_process_group())
    return y


ENTRIES = [
    Entry("comm_start", all_reduce_alone, ref=lambda torch, x: x.detach().clone(), cases=((Input((3, 5)),),),
          dtypes=tuple(FLOATS) + tuple(INTEGERS), differentiable=False, also_runs=("comm_wait",),
          xfail={"device": "collectives communicate cpu tensors (the MPI backend): all_reduce of a test:0 tensor "
                           "raises NotImplementedError naming the device"},
          note="a group of one: the value passes through the communication thread unchanged"),
]
