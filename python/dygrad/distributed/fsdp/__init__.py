"""torch.distributed.fsdp: fully_shard (torch's FSDP2 API), ZeRO-3 and, with reshard_after_forward=False, ZeRO-2
(docs/distributed.md "Sharded parameters: fully_shard").

Each parameter a `fully_shard(module)` call manages is stored as this rank's rows of it (dim 0 split in equal
parts, the last padded with zeros): the module's registered parameter *is* that shard, so `model.parameters()` and
every optimizer built from it see shards, and the optimizer state is sharded too. Before the module's forward its
parameters are all-gathered (one all-gather per parameter into a padded buffer, in flight together; the next
module's are issued as this one starts: prefetch) and the module computes with the whole tensors, set as instance
attributes that shadow the shards. The gradient of each whole parameter is reduce-scattered into its shard's
gradient (the sum, then / world: DDP's average). With reshard_after_forward the whole parameters are dropped
after the forward: what autograd saved of them is kept as a token (a saved-tensor hook), and backward all-gathers
them again when it first needs one (and prefetches the module before it in forward order).
"""
import threading
from dataclasses import dataclass

from ... import _C
from ..._not_provided import NotProvidedError, stand_in

__all__ = ["fully_shard", "register_fsdp_forward_method", "full_state_dict", "save_sharded_checkpoint",
           "load_sharded_checkpoint", "load_full_state_dict", "full_optimizer_states",
           "shard_optimizer_state", "FSDPModule", "MixedPrecisionPolicy", "OffloadPolicy", "CPUOffloadPolicy",
           "FullyShardedDataParallel"]

FullyShardedDataParallel = stand_in("FullyShardedDataParallel", __name__,
                                     "FSDP1's wrapper class (use fully_shard, FSDP2's API)")


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """torch's: param_dtype, the dtype the parameters are gathered and computed in; reduce_dtype, the dtype their
    gradients are reduce-scattered in (the shards keep their own dtype); output_dtype, the root's outputs' dtype;
    cast_forward_inputs, whether the root's floating inputs are cast to param_dtype."""
    param_dtype: object = None
    reduce_dtype: object = None
    output_dtype: object = None
    cast_forward_inputs: bool = True


@dataclass(frozen=True)
class OffloadPolicy:
    """torch's: no offload."""


@dataclass(frozen=True)
class CPUOffloadPolicy(OffloadPolicy):
    """torch's offload of the shards to the host: dygrad's tensors of a CPU run are on the host already (accepted,
    nothing moves); with a device's parameters it is not provided."""
    pin_memory: bool = True


def _dist():
    from ... import distributed
    return distributed


_state = threading.local()  # per thread: the FSDP forwards running (depth) and the saved-tensor hooks pushed


def _depth():
    return getattr(_state, "depth", 0)


class _Param:
    """One managed parameter: its shard (the registered Parameter), the whole shape, the rows per rank, and the
    (module, name) pairs it is registered under (a tied parameter has several)."""
    __slots__ = ("shard", "shape", "rows", "owners", "requires_grad")

    def __init__(self, shard, shape, rows, owners):
        self.shard, self.shape, self.rows, self.owners = shard, shape, rows, owners
        self.requires_grad = shard.requires_grad


class _Group:
    """The parameters one fully_shard call manages, and their gathered state."""

    def __init__(self, module, params, process_group, reshard_after_forward, mp_policy):
        self.module = module
        self.params = params
        self.pg = process_group
        self.world = process_group.size()
        self.rank = process_group.rank()
        self.reshard_after_forward = reshard_after_forward
        self.mp = mp_policy
        self.full = None        # per param: the whole tensor (a view of `padded`), while unsharded
        self.versions = None    # the shards' versions when gathered (an optimizer step makes them stale)
        self.padded = None      # per param: the all-gather's output buffer
        self.works = None       # the all-gathers in flight
        self.sync_grads = True
        self.pending = {}       # param index -> the whole gradient accumulated while sync_grads is off
        self.backward_left = 0  # gradients still to come in this backward before resharding
        self.in_backward = False
        self.gather_mark = None  # a stream mark after this group's last all-gathers were waited for
        self.reduce_mark = None  # a stream mark after this group's last reduce-scatter in a backward

    # -- gathering ----------------------------------------------------------------------------------------------
    def issue(self):
        """Starts the all-gathers (no host block: the collectives run on the communication thread, and what reads
        their results waits on the stream)."""
        if self.padded is not None and self.versions == [p.shard._version for p in self.params]:
            return
        self.reshard()
        _limit_in_flight(self)
        self.versions = [p.shard._version for p in self.params]
        import dygrad as dg
        dist = _dist()
        self.padded, self.works = [], []
        with dg.no_grad():
            for p in self.params:
                shard = p.shard.detach()
                if self.mp.param_dtype is not None and shard.is_floating_point():
                    shard = shard.to(self.mp.param_dtype)
                out = dg.empty((self.world * p.rows,) + tuple(p.shape[1:]) if p.shape else (self.world * p.rows,),
                               dtype=shard.dtype, device=shard.device)
                _C._set_memory_category(out, "communication")  # the memory report's communication buffers
                self.works.append(dist.all_gather_into_tensor(out, shard.contiguous(), group=self.pg, async_op=True))
                self.padded.append(out)

    def gathered(self):
        """The whole tensors (issuing the all-gathers if not yet), waited on the stream."""
        if self.full is None or self.versions != [p.shard._version for p in self.params]:
            self.issue()
            for w in self.works:
                w.wait()
            self.gather_mark = _C._stream_mark()  # the stream past it: these all-gathers are done
            self.full = [buf[:p.shape[0]] if p.shape else buf[:1].reshape(()) for buf, p in zip(self.padded, self.params)]
            self.works = None
        return self.full

    def reshard(self):
        """Drops the whole tensors (their memory returns once nothing queued reads it)."""
        self.full = self.padded = self.works = self.versions = None
        self._unbind()

    # -- the module's attributes ------------------------------------------------------------------------------
    def _bind(self, tensors):
        for p, t in zip(self.params, tensors):
            for module, name in p.owners:
                module.__dict__[name] = t

    def _unbind(self):
        for p in self.params:
            for module, name in p.owners:
                module.__dict__.pop(name, None)

    # -- forward and backward -----------------------------------------------------------------------------------
    def pre_forward(self):
        self.in_backward = False
        full = self.gathered()
        attached = []
        for i, (p, t) in enumerate(zip(self.params, full)):
            if p.requires_grad and is_grad_enabled():
                t = _Unsharded.apply(p.shard, t, self, i)
            attached.append(t)
        self.backward_left = sum(1 for p in self.params if p.requires_grad) if is_grad_enabled() else 0
        self._bind(attached)
        _active[self] = {_C._storage_address(t): i for i, t in enumerate(full)}

    def pre_backward(self):
        """Before the module's backward (a hook on its outputs' gradients): its parameters gathered again and bound to
        its modules, for what backward runs of its forward again (an activation checkpoint's recompute reads the
        weights through the modules)."""
        if self.backward_left <= 0:
            return
        self.in_backward = True
        # As the forward saw them (requiring grad where the shard does: a recompute must save what the forward saved);
        # fresh leaves, since a recompute's own graph is dropped: the gradients come through the forward's Function.
        bound = []
        for p, t in zip(self.params, self.gathered()):
            t = t.detach()
            bound.append(t.requires_grad_(True) if p.requires_grad else t)
        self._bind(bound)

    def post_forward(self):
        if self.reshard_after_forward:
            _active.pop(self, None)
            self.reshard()
        else:
            self._unbind()  # between forward and backward the registered parameters are the shards again

    def reduce(self, index, grad):
        """The whole gradient of parameter `index` -> this rank's shard of the ranks' average."""
        import dygrad as dg
        dist = _dist()
        p = self.params[index]
        if index in self.pending:
            grad = grad + self.pending.pop(index)
        if not self.sync_grads:
            self.pending[index] = grad.detach()
            return None
        reduce_dtype = self.mp.reduce_dtype or p.shard.dtype
        if p.shape and p.shape[0] == self.world * p.rows and grad.dtype == reduce_dtype:
            full = grad.contiguous()  # rows split evenly: the gradient itself is the reduce-scatter's input
        else:  # zero padding rows (or another dtype): a copy
            full = dg.zeros((self.world * p.rows,) + tuple(p.shape[1:]), dtype=reduce_dtype, device=grad.device)
            _C._set_memory_category(full, "communication")
            head = full[:p.shape[0] if p.shape else 1]
            head.copy_(grad.reshape(head.shape))
        out = dg.empty((p.rows,) + tuple(p.shape[1:]), dtype=reduce_dtype, device=grad.device)
        if self.world > 1:
            dist.reduce_scatter_tensor(out, full, op=dist.ReduceOp.SUM, group=self.pg)
            out.div_(self.world)  # DDP's average: the sum, then / world
        else:
            out.copy_(full)
        return out.to(p.shard.dtype) if out.dtype != p.shard.dtype else out

    def backward_done_one(self):
        """After the last gradient of this backward the gathered parameters go (torch's reshard after backward)."""
        self.backward_left -= 1
        if self.backward_left <= 0:
            self.reduce_mark = _C._stream_mark()
            _active.pop(self, None)
            self.reshard()


_active = {}  # group -> {storage address of a whole parameter: its index}, while its forward's values are gathered


from ...autograd import Function, is_grad_enabled  # noqa: E402


class _Unsharded(Function):
    """The whole parameter as a function of its shard: forward passes the gathered tensor through, backward
    reduce-scatters the whole gradient into the shard's."""

    @staticmethod
    def forward(ctx, shard, full, group, index):
        ctx.group, ctx.index = group, index
        return full.view(full.shape)

    @staticmethod
    def backward(ctx, grad):
        group = ctx.group
        try:
            return group.reduce(ctx.index, grad), None, None, None
        finally:
            group.backward_done_one()


# -- saved-tensor hooks: what autograd saves of a whole parameter is a token, gathered again when backward reads it -
def _pack(t):
    address = _C._storage_address(t)
    for group, index_of in _active.items():
        i = index_of.get(address)
        if i is not None and group.reshard_after_forward:
            return ("fsdp", group, i, tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)
    return t


def _unpack(packed):
    if not (isinstance(packed, tuple) and len(packed) == 7 and packed[0] == "fsdp"):
        return packed
    _, group, i, shape, stride, offset, dtype = packed
    if group.full is None:
        group.in_backward = True
        group.gathered()
        order = _forward_order(group)
        if order is not None and order > 0:  # prefetch the module before it in forward order
            previous = _order_list[order - 1]
            previous.in_backward = True
            previous.issue()
    buf = group.padded[i]
    return _C._as_strided(buf, list(shape), list(stride), offset)


_order_list = []  # the groups in the order their forwards ran (recorded at the first step)


def _limit_in_flight(group):
    """torch's all-gather rate limit: the host runs ahead of the stream, and a collective's buffers are freed only
    when it has run, so without a bound every module's parameters (and in backward every gradient's reduce-scatter
    buffers) would be in memory at once. Before a group gathers, the host waits until the group two before it in
    this pass's order (forward order, or its reverse in backward) has finished its all-gathers and reduce-scatters:
    at most two modules' gathered parameters are held or in flight."""
    i = _forward_order(group)
    if i is None:
        return
    other = i + 2 if group.in_backward else i - 2
    if 0 <= other < len(_order_list):
        before = _order_list[other]
        for attr in ("gather_mark", "reduce_mark"):
            mark = getattr(before, attr)
            if mark is not None:
                _C._stream_wait(mark)
                setattr(before, attr, None)


def _forward_order(group):
    try:
        return _order_list.index(group)
    except ValueError:
        return None


def _pre_forward_hook(module, args, kwargs):
    group = module._fsdp_group
    if _depth() == 0:  # the root: the saved-tensor hooks for the whole forward
        from ...autograd.graph import saved_tensors_hooks
        hooks = saved_tensors_hooks(_pack, _unpack)
        hooks.__enter__()
        _state.hooks = hooks
        _state.root = module
        _state.seen = []
        if group.mp.cast_forward_inputs and group.mp.param_dtype is not None:
            args, kwargs = _cast_inputs(args, kwargs, group.mp.param_dtype)
    _state.depth = _depth() + 1
    _state.seen.append(group)
    group.pre_forward()
    i = _forward_order(group)
    if i is not None and i + 1 < len(_order_list):  # prefetch the next module's parameters
        _order_list[i + 1].in_backward = False
        _order_list[i + 1].issue()
    return args, kwargs


def _post_forward_hook(module, args, kwargs, output):
    group = module._fsdp_group
    group.post_forward()
    if group.backward_left > 0:  # the pre-backward hook: on every output that carries a gradient
        for t in _tensors_in(output):
            if t.requires_grad:
                t.register_hook(lambda grad, group=group: group.pre_backward())
    _state.depth = _depth() - 1
    if _depth() == 0:
        _state.hooks.__exit__(None, None, None)
        _state.hooks = None
        if not _order_list or _order_list != _state.seen:
            _order_list[:] = _state.seen
        if group.mp.output_dtype is not None:
            output = _cast_tree(output, group.mp.output_dtype)
        return output
    return None


def _tensors_in(x):
    if isinstance(x, _C.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors_in(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors_in(v)


def _cast_tree(x, dtype):
    if isinstance(x, _C.Tensor):
        return x.to(dtype) if x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(_cast_tree(v, dtype) for v in x)
    if isinstance(x, dict):
        return {k: _cast_tree(v, dtype) for k, v in x.items()}
    return x


def _cast_inputs(args, kwargs, dtype):
    return _cast_tree(tuple(args), dtype), _cast_tree(dict(kwargs), dtype)


class FSDPModule:
    """What fully_shard makes a module also be (torch's FSDPModule): its parameters are shards."""

    def unshard(self, async_op=False):
        """Gathers the parameters ahead of the forward (async_op: returns a handle whose wait() finishes it)."""
        group = self._fsdp_group
        group.issue()
        if async_op:
            return _UnshardHandle(group)
        group.gathered()
        return None

    def reshard(self):
        """Drops the gathered parameters (the shards stay)."""
        self._fsdp_group.reshard()

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        """Without gradient sync, backward accumulates the whole gradients locally (no reduce-scatter) and the next
        synchronised backward reduces their sum (gradient accumulation, as torch's)."""
        for m in (self.modules() if recurse else [self]):
            if isinstance(m, FSDPModule):
                m._fsdp_group.sync_grads = bool(requires_gradient_sync)

    def set_reshard_after_forward(self, reshard_after_forward, recurse=True):
        for m in (self.modules() if recurse else [self]):
            if isinstance(m, FSDPModule):
                m._fsdp_group.reshard_after_forward = bool(reshard_after_forward)

    def set_is_last_backward(self, is_last_backward):
        pass  # every backward reduce-scatters as soon as a gradient is whole


class _UnshardHandle:
    def __init__(self, group):
        self.group = group

    def wait(self):
        self.group.gathered()


_classes = {}


def fully_shard(module, *, mesh=None, reshard_after_forward=None, shard_placement_fn=None,
                mp_policy=MixedPrecisionPolicy(), offload_policy=OffloadPolicy(), ignored_params=None,
                dp_mesh_dims=None):
    """torch's FSDP2 `fully_shard`: shards the parameters of `module`'s subtree that no inner fully_shard manages
    (call it on each block, then on the root). Returns the module, now also an FSDPModule."""
    if isinstance(module, (list, tuple)):
        for m in module:
            fully_shard(m, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp_policy,
                        offload_policy=offload_policy, ignored_params=ignored_params)
        return module
    if mesh is not None:
        raise NotProvidedError("fully_shard(mesh=...): dygrad has no DeviceMesh yet; the default group (every rank "
                               "of init_process_group) is the one it shards over")
    if shard_placement_fn is not None or dp_mesh_dims is not None:
        raise NotProvidedError("fully_shard(shard_placement_fn=/dp_mesh_dims=): parameters are sharded on dim 0")
    if isinstance(offload_policy, CPUOffloadPolicy) and any(not p.is_cpu for p in module.parameters()):
        raise NotProvidedError("fully_shard(offload_policy=CPUOffloadPolicy()) of a device's parameters")
    if isinstance(module, FSDPModule):
        raise ValueError(f"fully_shard: {type(module).__name__} is already sharded")
    dist = _dist()
    pg = dist._group(None, "fully_shard")
    world, rank = pg.size(), pg.rank()
    ignored = {id(p) for p in (ignored_params or ())}
    managed = {}  # id(param) -> _Param
    owners = {}
    for name, sub in module.named_modules():
        for pname, p in list(sub._parameters.items()):
            if p is None or id(p) in ignored or getattr(p, "_fsdp", None) is not None:
                continue
            owners.setdefault(id(p), (p, []))[1].append((sub, pname))
    import dygrad as dg
    from ...nn import Parameter
    params = []
    for pid, (p, where) in owners.items():
        shape = tuple(p.shape)
        rows = -(-shape[0] // world) if shape else 1
        whole = p.detach().reshape((1,)) if not shape else p.detach()
        local = dg.zeros((rows,) + shape[1:], dtype=p.dtype, device=p.device)
        start, stop = min(rank * rows, whole.shape[0]), min((rank + 1) * rows, whole.shape[0])
        if stop > start:
            local[:stop - start].copy_(whole[start:stop])
        _C._set_memory_category(local, "parameter")
        shard = Parameter(local, requires_grad=p.requires_grad)
        param = _Param(shard, shape, rows, where)
        shard._fsdp = (None, len(params))
        for sub, pname in where:
            sub._parameters[pname] = shard
        params.append(param)
    if reshard_after_forward is None:  # torch: True except the root (whose backward starts at once)
        reshard_after_forward = not _is_root_call(module)
    group = _Group(module, params, pg, bool(reshard_after_forward), mp_policy)
    for p in params:
        p.shard._fsdp = (group, p.shard._fsdp[1])
    module._fsdp_group = group
    cls = type(module)
    if cls not in _classes:
        _classes[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    module.__class__ = _classes[cls]
    module.register_forward_pre_hook(_pre_forward_hook, with_kwargs=True)
    module.register_forward_hook(_post_forward_hook, with_kwargs=True, always_call=True)
    return module


def register_fsdp_forward_method(module, method_name):
    """torch's: `module.<method_name>` (e.g. generate, which calls forward directly, past the hooks) runs with the
    module's parameters gathered, as its forward does."""
    if not isinstance(module, FSDPModule):
        return
    method = getattr(module, method_name)

    def wrapped(*args, **kwargs):
        args, kwargs = _pre_forward_hook(module, args, kwargs)
        out = None
        try:
            out = method(*args, **kwargs)
        finally:
            replaced = _post_forward_hook(module, args, kwargs, out)
        return out if replaced is None else replaced

    module.__dict__[method_name] = wrapped


def full_state_dict(module):
    """module.state_dict() with every sharded parameter gathered whole (a collective: every rank calls it), keyed
    as the unsharded module's: what a single-process run loads. (torch's sharded state dict holds DTensors whose
    `full_tensor()` does this per tensor; dygrad's shards are plain tensors.)"""
    managed = _managed(module)
    out = {}
    for key, value in module.state_dict().items():
        found = managed.get(_C._storage_address(value)) if isinstance(value, _C.Tensor) else None
        out[key] = value if found is None else _gather_rows(found[0], found[1], value)
    return out


def _managed(module):
    """storage address of each shard -> (its group, its _Param), over the module's subtree."""
    out = {}
    for m in module.modules():
        group = m.__dict__.get("_fsdp_group")
        if group is not None:
            for p in group.params:
                out[_C._storage_address(p.shard)] = (group, p)
    return out


def _gather_rows(group, p, local):
    """A tensor laid out as parameter p's shard (this rank's rows) -> the whole tensor (a collective)."""
    import dygrad as dg
    buf = dg.empty((group.world * p.rows,) + tuple(local.shape[1:]), dtype=local.dtype, device=local.device)
    _dist().all_gather_into_tensor(buf, local.detach().contiguous(), group=group.pg)
    return buf[:p.shape[0]].clone() if p.shape else buf[:1].reshape(()).clone()


def _rows_of(group, p, whole):
    """This rank's rows of a whole tensor shaped as parameter p (zero-padded), the layout of its shard."""
    import dygrad as dg
    whole = whole.detach().reshape((1,)) if not p.shape else whole.detach()
    local = dg.zeros((p.rows,) + tuple(whole.shape[1:]), dtype=whole.dtype, device=whole.device)
    start, stop = min(group.rank * p.rows, whole.shape[0]), min((group.rank + 1) * p.rows, whole.shape[0])
    if stop > start:
        local[:stop - start].copy_(whole[start:stop])
    return local


def load_full_state_dict(module, state_dict, strict=True):
    """The inverse of full_state_dict: a whole (unsharded) state dict loaded into a sharded module, each rank
    keeping its rows of each sharded parameter (no communication: every rank reads the whole state dict)."""
    import dygrad as dg
    managed = _managed(module)
    own = module.state_dict()
    local = {}
    for key, value in state_dict.items():
        mine = own.get(key)
        found = managed.get(_C._storage_address(mine)) if isinstance(mine, _C.Tensor) else None
        if found is not None:
            group, p = found
            if tuple(value.shape) != p.shape:
                raise RuntimeError(f"[load_full_state_dict] {key}: the checkpoint's shape {tuple(value.shape)} is not "
                                   f"the parameter's {p.shape}")
            value = _rows_of(group, p, value)
        local[key] = value
    with dg.no_grad():
        return module.load_state_dict(local, strict=strict)


def full_optimizer_states(module, optimizer):
    """Per parameter of the optimizer (groups in order), its state with every tensor laid out as a shard gathered
    whole (a collective: every rank calls it): what the unsharded optimizer's state would be."""
    managed = _managed(module)
    out = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            found = managed.get(_C._storage_address(param))
            whole = {}
            for k, v in state.items():
                if found is not None and isinstance(v, _C.Tensor) and tuple(v.shape) == tuple(param.shape) and v.dim():
                    whole[k] = _gather_rows(found[0], found[1], v)
                else:
                    whole[k] = v
            out.append(whole)
    return out


def shard_optimizer_state(module, param, whole):
    """One parameter's whole optimizer state (as full_optimizer_states gives it) -> this rank's shard of it."""
    found = _managed(module).get(_C._storage_address(param))
    if found is None:
        return dict(whole)
    group, p = found
    return {k: _rows_of(group, p, v) if isinstance(v, _C.Tensor) and tuple(v.shape) == p.shape and v.dim() else v
            for k, v in whole.items()}


# -- sharded checkpoints: each rank writes its rows, any world size reads them ------------------------------------
def _host(t):
    """A tensor as a NumPy array for the file (bfloat16 as float32: exact; its dtype is in the layout)."""
    t = t.detach()
    return (t.float() if t.dtype == _C.bfloat16 else t).contiguous().numpy()


def _checkpoint_entries(module, optimizer):
    """(name, tensor, its _Group and _Param or None): the module's state dict and, per parameter, its optimizer
    state under the parameter's name ("optim.<name>.<state>")."""
    managed = _managed(module)
    entries = []
    names = {}
    for key, value in module.state_dict().items():
        found = managed.get(_C._storage_address(value)) if isinstance(value, _C.Tensor) else None
        entries.append((f"model.{key}", value, found))
        if isinstance(value, _C.Tensor):
            names.setdefault(_C._storage_address(value), key)
    if optimizer is not None:
        for group in optimizer.param_groups:
            for param in group["params"]:
                key = names.get(_C._storage_address(param))
                if key is None:
                    raise ValueError("[save_sharded_checkpoint] the optimizer holds a parameter the module does not")
                found = managed.get(_C._storage_address(param))
                for k, v in optimizer.state.get(param, {}).items():
                    if isinstance(v, _C.Tensor):
                        shaped = found is not None and v.dim() and tuple(v.shape) == tuple(param.shape)
                        entries.append((f"optim.{key}.{k}", v, found if shaped else None))
    return entries


def save_sharded_checkpoint(path, module, optimizer=None):
    """Writes `path/shard-<rank>-of-<world>.safetensors` on every rank (a collective: every rank calls it): its rows of
    each sharded parameter and optimizer state, never gathered; rank 0 also writes what is not sharded (buffers,
    step counts). load_sharded_checkpoint reads it at any world size, or into an unsharded module."""
    import json
    import os

    from ...safetensors_io import save_file
    dist = _dist()
    world, rank = (dist.get_world_size(), dist.get_rank()) if dist.is_initialized() else (1, 0)
    os.makedirs(path, exist_ok=True)
    arrays, layout = {}, {}
    for name, value, found in _checkpoint_entries(module, optimizer):
        if found is not None:
            group, p = found
            arrays[name] = _host(value)
            layout[name] = {"shape": list(p.shape), "rows": p.rows, "dtype": str(value.dtype)}
        elif rank == 0:
            arrays[name] = _host(value)
            layout[name] = {"dtype": str(value.dtype), "whole_shape": list(value.shape)}
    save_file(arrays, os.path.join(path, f"shard-{rank:05d}-of-{world:05d}.safetensors"),
              {"layout": json.dumps(layout), "rank": str(rank), "world": str(world)})
    if world > 1:
        dist.barrier()  # every rank's file exists when any returns


def load_sharded_checkpoint(path, module, optimizer=None):
    """Loads what save_sharded_checkpoint wrote, at any world size: a sharded module's ranks each take their rows
    (the files of every rank are read and each parameter's rows assembled), an unsharded module the whole tensors;
    the optimizer's state likewise (the optimizer must hold the module's parameters)."""
    import glob
    import json
    import os

    import dygrad as dg

    from ...safetensors_io import load_file
    files = sorted(glob.glob(os.path.join(path, "shard-*-of-*.safetensors")))
    if not files:
        raise FileNotFoundError(f"[load_sharded_checkpoint] no shard files in {path}")
    saved_world = int(files[0].rsplit("-of-", 1)[1].split(".")[0])
    if len(files) != saved_world:
        raise RuntimeError(f"[load_sharded_checkpoint] {path} holds {len(files)} shard files of {saved_world}")
    pieces, layout = {}, {}
    for f in files:
        arrays, meta = load_file(f)
        r = int(meta["rank"])
        for name, info in json.loads(meta["layout"]).items():
            layout[name] = info
            pieces.setdefault(name, {})[r] = arrays[name]

    def whole(name):
        info = layout[name]
        dtype = getattr(dg, info["dtype"].rsplit(".", 1)[-1])
        if "rows" not in info:  # (the file stores a 0-d tensor as 1-d)
            return dg.from_numpy(pieces[name][0]).to(dtype).reshape(tuple(info["whole_shape"]))
        shape, rows = info["shape"], info["rows"]
        n = shape[0] if shape else 1
        parts = [pieces[name][r][:max(0, min(rows, n - r * rows))] for r in range(saved_world)]
        import numpy as np
        t = dg.from_numpy(np.concatenate(parts, axis=0)).to(dtype)
        return t.reshape(tuple(shape)) if shape else t.reshape(())

    entries = _checkpoint_entries(module, optimizer)
    state = {}
    for name, value, found in entries:
        if not name.startswith("model."):
            continue
        if name not in layout:
            raise KeyError(f"[load_sharded_checkpoint] {name[6:]} is not in the checkpoint at {path}")
        t = whole(name)
        state[name[6:]] = t if found is None else _rows_of(found[0], found[1], t)
    with dg.no_grad():
        module.load_state_dict(state)
    if optimizer is not None:
        managed = _managed(module)
        names = {_C._storage_address(v): k for k, v in module.state_dict().items() if isinstance(v, _C.Tensor)}
        for group in optimizer.param_groups:
            for param in group["params"]:
                key = names[_C._storage_address(param)]
                found = managed.get(_C._storage_address(param))
                restored = {}
                for name in layout:
                    prefix = f"optim.{key}."
                    if name.startswith(prefix):
                        t = whole(name)
                        if found is not None and t.dim() and tuple(t.shape) == found[1].shape:
                            t = _rows_of(found[0], found[1], t)
                        restored[name[len(prefix):]] = t if name.endswith(".step") else _state_tensor(t)
                if restored:
                    optimizer.state[param] = restored


def _state_tensor(t):
    from ...optim.optimizer import state_tensor
    return state_tensor(t)


def _grad_norm_sharded(params, norm_type):
    """The gradient norm over sharded and replicated parameters together (clip_grad_norm_ with fully_shard): the
    shards' norms combined over the ranks, the replicated gradients counted once."""
    import dygrad as dg
    dist = _dist()
    shards = [p.grad for p in params if p.grad is not None and getattr(p, "_fsdp", None) is not None]
    others = [p.grad for p in params if p.grad is not None and getattr(p, "_fsdp", None) is None]
    pg = next(p._fsdp[0].pg for p in params if getattr(p, "_fsdp", None) is not None)
    inf = norm_type == float("inf")
    part = _C._grad_norm(shards, norm_type) if shards else dg.zeros(())
    part = part.clone() if inf else part.float() ** norm_type
    dist.all_reduce(part, op=dist.ReduceOp.MAX if inf else dist.ReduceOp.SUM, group=pg)
    if others:
        rest = _C._grad_norm(others, norm_type)
        part = dg.maximum(part, rest) if inf else part + rest.float() ** norm_type
    return part if inf else part ** (1.0 / norm_type)


def _is_root_call(module):
    """torch decides the root lazily; at the call: a module containing already-sharded modules is the root."""
    return any(isinstance(m, FSDPModule) for m in module.modules() if m is not module)


def _sharded(params):
    """The FSDP shards among `params` (for the global gradient norm)."""
    return [p for p in params if getattr(p, "_fsdp", None) is not None]

