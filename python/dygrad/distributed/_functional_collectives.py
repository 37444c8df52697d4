"""torch.distributed._functional_collectives: the names libraries import (transformers' expert and tensor
parallelism). dygrad's collectives are ordered on the stream, so a tensor is ready for every later op: waiting on
one is the tensor itself. The autograd all-to-all waits for an all-to-all collective (not over MPI yet)."""
from .._not_provided import stand_in_function


def wait_tensor(tensor):
    """The tensor a collective wrote, ready for later ops (torch blocks on the CPU; dygrad's stream orders it)."""
    return tensor


all_to_all_single_autograd = stand_in_function("torch.distributed._functional_collectives.all_to_all_single_autograd",
                                               "no all-to-all collective yet")
