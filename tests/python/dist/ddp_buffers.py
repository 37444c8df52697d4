"""Run under mpirun by tests/python/test_distributed.py: DistributedDataParallel's buffer broadcast before each
forward (coalesced, one broadcast per dtype). Each rank gives its buffers values of its own; every forward must
see rank 0's, also a forward that updates a buffer in place, and with broadcast_buffers=False each rank keeps its
own. Rank r writes what its forwards saw to OUT_DIR/buffers_rank<r>.json."""
import json
import os
import sys

import dygrad as dg
import dygrad.distributed as dist
import dygrad.nn as nn

dist.init_process_group("mpi")
rank = dist.get_rank()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("scale", dg.ones(3))
        self.register_buffer("table", dg.zeros(2, 3).t())  # not contiguous: goes through the coalesced copy
        self.register_buffer("mask", dg.ones(3, dtype=dg.bool))  # the only bool buffer: broadcast in place
        self.register_buffer("steps", dg.zeros((), dtype=dg.int64))
        self.register_buffer("empty", dg.zeros(0))
        self.register_buffer("shift", dg.zeros(3), persistent=False)

    def forward(self, x):
        self.steps.add_(1)  # a running statistic, updated in place after the broadcast
        y = self.lin(x) * self.scale + self.table.sum(1) + self.shift
        return dg.where(self.mask, y, dg.zeros_like(y)), self.steps.clone()


net = Net()
ddp = nn.parallel.DistributedDataParallel(net)
seen = []
for step in range(3):
    with dg.no_grad():  # each rank drifts its buffers its own way
        net.scale.fill_(float(10 * rank + step + 1))
        net.table.copy_(dg.full((3, 2), float(rank - step)))
        net.mask.copy_(dg.tensor([True, rank == 0, step % 2 == 0]))
        net.steps.fill_(100 * rank)
        net.shift.fill_(0.5 * rank)
    out, steps = ddp(dg.ones(1, 3))
    seen.append({"scale": net.scale.tolist(), "table": net.table.tolist(), "mask": net.mask.tolist(),
                 "steps": steps.item(), "shift": net.shift.tolist(), "masked_zero": (out[0] == 0).tolist()})
ddp.broadcast_buffers = False
with dg.no_grad():
    net.scale.fill_(float(rank + 7))
ddp(dg.ones(1, 3))
seen.append({"scale": net.scale.tolist()})
with open(os.path.join(sys.argv[1], f"buffers_rank{rank}.json"), "w") as f:
    json.dump(seen, f)
dist.destroy_process_group()
