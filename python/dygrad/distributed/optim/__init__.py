"""torch.distributed.optim: ZeroRedundancyOptimizer (ZeRO-1, docs/distributed.md "Sharded optimizer state").

Each rank keeps the optimizer state of its share of the parameters only: the parameters are partitioned among the
ranks as torch partitions them (per parameter group, largest first, each to the rank holding the fewest elements so
far), each rank's local optimizer (`optimizer_class`, e.g. dygrad's fused AdamW) steps its share with the gradients
every rank holds (averaged by DistributedDataParallel), and each updated parameter is then broadcast by its owner.
The parameters after a step are bitwise those of the unsharded optimizer: the same kernel on the same values."""
from ... import _C
from ...optim.optimizer import Optimizer

__all__ = ["ZeroRedundancyOptimizer"]


def _dist():
    from ... import distributed
    return distributed


def _to_host(obj):
    """A state dict's tensors as NumPy arrays (pickled to another rank) with their dtype's name."""
    if isinstance(obj, _C.Tensor):
        return ("__dygrad_tensor__", str(obj.dtype), obj.detach().float().numpy() if obj.dtype == _C.bfloat16
                else obj.detach().numpy().copy())
    if isinstance(obj, dict):
        return {k: _to_host(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_host(v) for v in obj)
    return obj


def _from_host(obj):
    import dygrad as dg
    if isinstance(obj, tuple) and len(obj) == 3 and obj[0] == "__dygrad_tensor__":
        dtype = getattr(dg, obj[1].rsplit(".", 1)[-1])
        return dg.from_numpy(obj[2]).to(dtype)
    if isinstance(obj, dict):
        return {k: _from_host(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_from_host(v) for v in obj)
    return obj


class ZeroRedundancyOptimizer(Optimizer):
    """torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class, process_group=None,
    parameters_as_bucket_view=False, overlap_with_ddp=False, **defaults): `optimizer_class(**defaults)` over this
    rank's share of `params`; `step` updates the share and broadcasts it; `consolidate_state_dict(to)` then
    `state_dict()` on rank `to` give the whole optimizer's state in torch's layout."""

    def __init__(self, params, optimizer_class, process_group=None, parameters_as_bucket_view=False,
                 overlap_with_ddp=False, **defaults):
        if overlap_with_ddp:
            from ..._not_provided import NotProvidedError
            raise NotProvidedError("ZeroRedundancyOptimizer(overlap_with_ddp=True) (a DDP communication hook "
                                   "running the step per bucket) is not provided: step after backward instead")
        self._initialized = False
        super().__init__(params, defaults)
        dist = _dist()
        self.process_group = dist._group(process_group, "ZeroRedundancyOptimizer")
        self.world_size = self.process_group.size()
        self.rank = self.process_group.rank()
        self.global_rank = dist.get_global_rank(self.process_group, self.rank) \
            if process_group not in (None, dist.GroupMember.WORLD) else self.rank
        self.parameters_as_bucket_view = bool(parameters_as_bucket_view)
        self._optim_constructor = optimizer_class
        self._optim_defaults = defaults
        self._all_state_dicts = []
        self._partition = None
        local = self._partition_parameters()[self.rank]
        self.optim = optimizer_class(local, **defaults)
        self.state = self.optim.state  # this rank's share
        self._sync_param_groups(self.optim.param_groups, self.param_groups)
        self._buckets = None
        if self.parameters_as_bucket_view:
            self._build_buckets()
        self._initialized = True

    # -- the partition -------------------------------------------------------------------------------------------
    def _partition_parameters(self):
        """Per rank, its parameter groups (the hyper-parameters of every group, the rank's share of its params):
        torch's rule, so a rank owns the same parameters as under torch's ZeroRedundancyOptimizer."""
        if self._partition is None:
            sizes = [0] * self.world_size
            per_rank = [[] for _ in range(self.world_size)]
            self._owner = {}
            for group in self.param_groups:
                shares = [[] for _ in range(self.world_size)]
                for p in sorted(group["params"], key=lambda t: t.numel(), reverse=True):
                    r = sizes.index(min(sizes))
                    shares[r].append(p)
                    sizes[r] += p.numel()
                    self._owner[id(p)] = r
                for r in range(self.world_size):
                    share = {k: v for k, v in group.items() if k != "params"}
                    share["params"] = shares[r]
                    per_rank[r].append(share)
            self._partition = per_rank
        return self._partition

    def _param_index(self):
        """Each parameter's index in the whole optimizer's state_dict (groups in order, params in order)."""
        index = {}
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
        return index

    @staticmethod
    def _sync_param_groups(source, destination):
        """Copies each group's hyper-parameters (everything but its params) where they differ: a scheduler changes
        the whole optimizer's lr, the local optimizer steps with it."""
        for s, d in zip(source, destination):
            for k, v in s.items():
                if k == "params":
                    continue
                if k not in d or (d[k] is not v and d[k] != v):
                    d[k] = v

    def add_param_group(self, param_group):
        """torch's: the new group is partitioned after the earlier ones (whose owners do not change), and this rank's
        share joins its local optimizer."""
        super().add_param_group(param_group)
        if not self._initialized:
            return
        self._sync_param_groups(self.param_groups, self.optim.param_groups)  # a scheduler's changes first
        self._partition = None
        local = self._partition_parameters()[self.rank]
        self.optim.add_param_group(local[-1])
        self._sync_param_groups(self.optim.param_groups, self.param_groups)  # the local optimizer's defaults
        if self.parameters_as_bucket_view:
            self._build_buckets()

    # -- the step ------------------------------------------------------------------------------------------------
    def _build_buckets(self):
        """parameters_as_bucket_view: per rank and dtype, the parameters that rank owns become views of one flat
        buffer, so each owner's update is broadcast in one call (torch's buckets)."""
        import dygrad as dg
        buckets = []
        for r, groups in enumerate(self._partition_parameters()):
            by_dtype = {}
            for group in groups:
                for p in group["params"]:
                    by_dtype.setdefault(p.dtype, []).append(p)
            for dtype, params in by_dtype.items():
                total = sum(p.numel() for p in params)
                flat = dg.empty((total,), dtype=dtype, device=params[0].device)
                offset = 0
                with dg.no_grad():
                    for p in params:
                        n = p.numel()
                        flat[offset:offset + n].copy_(p.detach().reshape(-1))
                        p.data = flat[offset:offset + n].view(p.shape)
                        offset += n
                buckets.append((r, flat))
        self._buckets = buckets

    def _sync_params(self):
        """Each parameter from the rank that updated it: broadcasts in flight together, waited on the stream."""
        dist = _dist()
        g = self.process_group
        works = []
        if self._buckets is not None:
            for r, flat in self._buckets:
                works.append(dist.broadcast(flat, group_src=r, group=g, async_op=True))
        else:
            index = self._param_index()
            owner = self._owner
            params = {}
            for group in self.param_groups:
                for p in group["params"]:
                    params[id(p)] = p
            for pid in sorted(params, key=index.get):
                p = params[pid]
                if p.is_contiguous():
                    works.append(dist.broadcast(p.data, group_src=owner[pid], group=g, async_op=True))
                else:  # through a contiguous copy, written back
                    buf = p.detach().contiguous()
                    dist.broadcast(buf, group_src=owner[pid], group=g)
                    with _no_grad():
                        p.copy_(buf)
        for w in works:
            w.wait()

    def step(self, closure=None, **kwargs):
        """The local optimizer's step over this rank's share, then every parameter from its owner."""
        self._sync_param_groups(self.param_groups, self.optim.param_groups)
        loss = self.optim.step(closure=closure, **kwargs) if closure is not None else self.optim.step(**kwargs)
        self._sync_params()
        self._sync_param_groups(self.optim.param_groups, self.param_groups)
        return loss

    # -- state dicts -----------------------------------------------------------------------------------------------
    def consolidate_state_dict(self, to=0):
        """Gathers every rank's share of the state on rank `to` of the group (a collective: every rank calls it)."""
        dist = _dist()
        self._sync_param_groups(self.param_groups, self.optim.param_groups)
        local = self.optim.state_dict()
        gathered = [None] * self.world_size if self.rank == to else None
        dist.gather_object(_to_host(local), gathered, group_dst=to, group=self.process_group)
        self._all_state_dicts = [_from_host(s) for s in gathered] if gathered is not None else []

    def state_dict(self):
        """The whole optimizer's state in torch's layout, on the rank consolidate_state_dict gathered it to."""
        if not self._all_state_dicts:
            raise RuntimeError("Optimizer state has not been consolidated on this rank. Please call "
                               "`consolidate_state_dict(to)` on all ranks beforehand if you meant to save the global "
                               "state.")
        index = self._param_index()
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {}
        for r, local in enumerate(self._all_state_dicts):
            for local_group, share in zip(local["param_groups"], self._partition_parameters()[r]):
                for local_index, p in zip(local_group["params"], share["params"]):
                    if local_index in local["state"]:
                        state[index[id(p)]] = local["state"][local_index]
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict):
        """The whole optimizer's state (as state_dict() gives it, from any world size): each rank keeps its share."""
        params = self._load_param_groups(state_dict["param_groups"])
        local_index = {}
        local_groups = []
        for share in self._partition_parameters()[self.rank]:
            ids = []
            for p in share["params"]:
                local_index[id(p)] = len(local_index)
                ids.append(local_index[id(p)])
            local_groups.append(ids)
        local_state = {}
        for i, s in state_dict["state"].items():
            p = params[int(i)]
            if id(p) in local_index:
                local_state[local_index[id(p)]] = s
        packed = []
        for ids, group in zip(local_groups, self.param_groups):
            g = {k: v for k, v in group.items() if k != "params"}
            g["params"] = ids
            packed.append(g)
        self.optim.load_state_dict({"state": local_state, "param_groups": packed})
        self.state = self.optim.state

    def __repr__(self):
        return f"ZeroRedundancyOptimizer(rank={self.rank}, world_size={self.world_size}, {self.optim!r})"


def _no_grad():
    from ...autograd import no_grad
    return no_grad()
