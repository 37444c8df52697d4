"""dygrad.utils.data: torch.utils.data's datasets, samplers, collation and DataLoader (docs/pytorch-api.md).
Shuffling and random_split draw from a dygrad.Generator, which gives torch's permutations for torch's seeds."""
from ._collate import default_collate, default_convert  # noqa: F401
from .dataloader import DataLoader, get_worker_info  # noqa: F401
from .dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, StackDataset, Subset,  # noqa: F401
                      TensorDataset, random_split)
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler  # noqa: F401
