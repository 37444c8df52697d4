"""Run by tests/python/test_distributed.py: every collective and point-to-point call given a test-device tensor must
raise at the call on every rank, naming the collective and the device, without reading the device's memory or
leaving the group unusable; DistributedDataParallel refuses a module on the device. A CPU all-reduce after them
must still work."""
import sys

import dygrad as dg
import dygrad.distributed as dist
from dygrad import nn


def say(line):
    """One write per line: both ranks share the pipe, and print's separate newline write lets lines interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


dg.testing.enable_test_device(1)
dist.init_process_group("mpi")
rank = dist.get_rank()
on_device = dg.ones(4, device="test:0")
host = dg.ones(4)
cases = {
    "all_reduce": lambda: dist.all_reduce(on_device),
    "all_reduce_async": lambda: dist.all_reduce(on_device, async_op=True),
    "broadcast": lambda: dist.broadcast(on_device, src=0),
    "reduce": lambda: dist.reduce(on_device, dst=0),
    "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(dg.zeros(8, device="test:0"), host),
    "all_gather": lambda: dist.all_gather([dg.zeros(4), dg.zeros(4)], on_device),
    "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(dg.zeros(2), dg.ones(4, device="test:0")),
    "send_recv": lambda: dist.send(on_device, dst=1) if rank == 0 else dist.recv(on_device, src=0),
    "isend_irecv": lambda: dist.isend(on_device, dst=1) if rank == 0 else dist.irecv(on_device, src=0),
    "DistributedDataParallel": lambda: nn.parallel.DistributedDataParallel(nn.Linear(2, 2).to("test:0")),
}
for name, call in cases.items():
    try:
        call()
        dg.synchronize()
        say(f"rank {rank} {name}: no error")
    except RuntimeError as e:
        say(f"rank {rank} {name}: raised {type(e).__name__}: {e}")
after = dg.full((4,), float(rank))
dist.all_reduce(after)
say(f"rank {rank} after {after.tolist()}")
dist.destroy_process_group()
