"""torch.distributed.tensor.parallel: tensor-parallel styles and parallelize_module (stand-ins: no sharding yet)."""
from ...._not_provided import stand_in, stand_in_function

_WHY = "no tensor parallelism yet"
ColwiseParallel = stand_in("ColwiseParallel", __name__, _WHY)
RowwiseParallel = stand_in("RowwiseParallel", __name__, _WHY)
SequenceParallel = stand_in("SequenceParallel", __name__, _WHY)
PrepareModuleInput = stand_in("PrepareModuleInput", __name__, _WHY)
PrepareModuleOutput = stand_in("PrepareModuleOutput", __name__, _WHY)
ParallelStyle = stand_in("ParallelStyle", __name__, _WHY)
parallelize_module = stand_in_function("torch.distributed.tensor.parallel.parallelize_module", _WHY)
