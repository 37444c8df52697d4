"""dygrad.nn.parallel.DistributedDataParallel: torch's data parallel wrapper over dygrad.distributed
(docs/distributed.md, "Data parallel").

Gradients are averaged in buckets (the first of 1 MiB, the rest of bucket_cap_mb = 25 MiB, parameters in reverse
order of registration, which is about the order backward produces them). Each parameter's post-accumulate hook
hands its gradient to its bucket; a full bucket is all-reduced (AVG) at once, asynchronously, in bucket order,
reading the gradients where backward left them (no copy into the bucket first: the communication thread gathers
them as it copies its input in),
so the communication runs while backward computes the earlier layers' gradients. The all-reduce averages (the sum,
then / world); when the last bucket is launched, each .grad becomes its view of its bucket, after the stream has
waited for the all-reduces (with gradient_as_bucket_view=False; torch instead copies the averages back into the
gradients backward made: a pass over every gradient that dygrad saves). The next step fills the same buffer again
once those .grads are dropped, and a fresh one while anything still holds them (_Bucket.claim). After the first
backward the buckets are rebuilt in the order the gradients arrived (torch's rebuild), with rank 0's order on
every rank."""
import weakref
import contextlib

from .. import _C
from .. import distributed as dist
from .module import Module

_FIRST_BUCKET_BYTES = 1 << 20  # torch's dist._DEFAULT_FIRST_BUCKET_BYTES
_DEFAULT_BUCKET_CAP_MB = 25


class _Bucket:
    def __init__(self, index, params, dtype):
        self.index = index
        self.params = params
        self.dtype = dtype
        self.offsets = []
        total = 0
        for p in params:
            self.offsets.append(total)
            total += p.numel()
        self.numel = total
        self.buffer = None
        self.views = None
        self.claim()
        self.pending = len(params)
        self.pieces = [None] * len(params)  # what the all-reduce reads for each parameter (see _mark_ready)
        self.work = None

    def claim(self):
        """The flat buffer this step's all-reduce writes, and its views. The last step's buffer is the .grads
        until they are dropped; once nothing but this bucket holds it (set_to_none, no queued op reading the
        .grads: the stream runs its users first), it is filled again. Otherwise, while a .grad or a user's name
        still shows the last step's averages, a fresh buffer (every element is written before it is reduced: a
        gradient or a zero). A buffer freed each step and allocated again would instead be cut up by the next
        backward's allocations, which left that backward ~2% slower (docs/distributed.md)."""
        if self.views is not None:
            return  # claimed this step (or, with gradient_as_bucket_view, for good)
        if self.buffer is None or _C._storage_holders(self.buffer) != 1:
            from .. import empty
            self.buffer = empty(self.numel, dtype=self.dtype, device="cpu")  # not the default device: the group's
            _C._set_memory_category(self.buffer, "gradient")
        self.views = [self.buffer[o:o + p.numel()].view(p.shape) for o, p in zip(self.offsets, self.params)]

    def hand_over(self):
        """The views now are the .grads: the bucket keeps only its buffer, and the next step claims again."""
        self.views = None


def _remove_hooks(handles):
    for h in handles:
        h.remove()


class DistributedDataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=None, init_sync=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None,
                 param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None,
                 skip_all_reduce_unused_params=False, bucket_cap_mb_list=None, batched_grad_copy=False,
                 forward_sync_buffers=None):
        super().__init__()
        if device_ids not in (None, [], ["cpu"]) or output_device not in (None, "cpu"):
            raise ValueError("DistributedDataParallel: device_ids and output_device must be None for CPU modules")
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if not t.is_cpu:  # before anything is broadcast or bucketed: the groups communicate host memory
                group = process_group if process_group is not None else dist.group.WORLD
                backend = group._backend if group is not None else "mpi"
                raise NotImplementedError(f"[DistributedDataParallel] the {backend} process group takes cpu "
                                          f"tensors; got {name} on {t.device} (keep the module on the cpu)")
        for unsupported, name in ((mixed_precision, "mixed_precision"), (device_mesh, "device_mesh"),
                                  (delay_all_reduce_named_params, "delay_all_reduce_named_params"),
                                  (param_to_hook_all_reduce, "param_to_hook_all_reduce")):
            if unsupported is not None:
                raise NotImplementedError(f"DistributedDataParallel: {name} is not supported by dygrad")
        self.module = module
        self.process_group = process_group if process_group is not None else dist.group.WORLD
        if self.process_group is None:
            raise ValueError("Default process group has not been initialized, please make sure to call "
                             "init_process_group.")
        self.broadcast_buffers = True if broadcast_buffers is None else bool(broadcast_buffers)
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        cap = (_DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb) * (1 << 20)
        self.bucket_bytes_cap = int(cap)

        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have any parameter that "
                               "requires a gradient.")
        self._param_names = {_key(p): n for n, p in named}
        self._params = [p for _, p in named]
        self._index = {_key(p): i for i, p in enumerate(self._params)}
        self._arrival = []  # parameter indices in the order the first synchronised backward made them ready
        self._has_rebuilt = False
        if init_sync:
            self._sync_module_states()
        self._buckets, self._where = self._make_buckets([p for _, p in reversed(named)], cap)
        # The hooks live in the parameters' C++ autograd state, which the garbage collector cannot see: a hook
        # holding this DDP (a bound method) would make a cycle through C++ that is never collected (the model, its
        # gradients and the buckets leaked when a DDP was dropped). They hold it weakly and go with it.
        ref = weakref.ref(self)

        def grad_ready(param):
            ddp = ref()
            if ddp is not None:
                ddp._grad_ready(param)
        self._hooks = [p.register_post_accumulate_grad_hook(grad_ready) for _, p in named]
        weakref.finalize(self, _remove_hooks, list(self._hooks))
        self._next_launch = 0
        self._iteration_active = False
        self._used = set()

    # --- construction -----------------------------------------------------------------------------------------
    def _sync_module_states(self):
        """Every rank starts from rank 0's parameters and buffers."""
        self._broadcast_coalesced(list(self.module.parameters()) + list(self.module.buffers()))

    def _make_buckets(self, params, cap):
        buckets, where, current, size = [], {}, [], 0
        limit = min(_FIRST_BUCKET_BYTES, cap)

        def close():
            nonlocal current, size, limit
            if current:
                b = _Bucket(len(buckets), current, current[0].dtype)
                for i, p in enumerate(current):
                    where[_key(p)] = (b, i)
                buckets.append(b)
            current, size, limit = [], 0, cap

        for p in params:
            nbytes = p.numel() * p.element_size()
            if current and (p.dtype != current[0].dtype or size + nbytes > limit):
                close()
            current.append(p)
            size += nbytes
        close()
        return buckets, where

    # --- forward ----------------------------------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        self._check_previous_reduction()
        if self._should_rebuild():
            self._rebuild_buckets()
        if self.broadcast_buffers and self.require_forward_param_sync:
            self._sync_buffers()
        if self.gradient_as_bucket_view:
            self._attach_bucket_views()
        output = self.module(*inputs, **kwargs)
        if _C.is_grad_enabled() and self.require_backward_grad_sync:
            self._prepare_for_backward(output)
        return output

    def _sync_buffers(self):
        self._broadcast_coalesced(list(self.module.buffers()))

    def _broadcast_coalesced(self, tensors):
        """Rank 0's values of tensors to every rank, as torch's _broadcast_coalesced: one broadcast per dtype (a
        contiguous tensor alone in its dtype is broadcast in place, the others through one flat copy), all in
        flight at once. Nothing blocks the host: the stream waits for each broadcast before the copies back and
        before any later op that reads or writes the tensors."""
        root = dist.get_global_rank(self.process_group, 0) if self.process_group is not dist.group.WORLD else 0
        by_dtype = {}
        for t in tensors:
            if t.numel() > 0:
                by_dtype.setdefault(t.dtype, []).append(t.detach())
        pending = []
        for group in by_dtype.values():
            if len(group) == 1 and group[0].is_contiguous():
                flat, group = group[0], []
            else:
                flat = _C.cat([t.reshape(-1) for t in group])
            pending.append((dist.broadcast(flat, src=root, group=self.process_group, async_op=True), flat, group))
        copy_back = self.process_group.rank() != 0  # the root (group rank 0) holds what it sent already
        for work, flat, group in pending:
            work.wait()
            if not copy_back:
                continue
            offset = 0
            for t in group:
                t.copy_(flat[offset:offset + t.numel()].view(t.shape))
                offset += t.numel()

    def _should_rebuild(self):
        # torch's Reducer::should_rebuild_buckets: once, after a synchronised backward, unless unused
        # parameters may change the order from step to step (find_unused_parameters without static_graph).
        return (not self._has_rebuilt and bool(self._arrival)
                and (self.static_graph or not self.find_unused_parameters))

    def _rebuild_buckets(self):
        """Buckets in the order the gradients arrived, so each fills (and is all-reduced) as early as possible.
        Ranks may see different orders: every rank takes rank 0's (torch's sync_bucket_indices)."""
        from .. import tensor, int64
        seen = set(self._arrival)
        order = self._arrival + [self._index[_key(p)] for b in self._buckets for p in b.params
                                 if self._index[_key(p)] not in seen]
        if self.process_group.size() > 1:
            t = tensor(order, dtype=int64, device="cpu")
            root = dist.get_global_rank(self.process_group, 0) if self.process_group is not dist.group.WORLD else 0
            dist.broadcast(t, src=root, group=self.process_group)
            with _C._HostReader("DistributedDataParallel"):  # once, at the first rebuild: rank 0's order
                order = t.tolist()
        self._has_rebuilt = True
        self._arrival = []
        params = [self._params[i] for i in order]
        if [self._index[_key(p)] for b in self._buckets for p in b.params] == order:
            return  # the registration order was the arrival order: the buckets stand
        # (with gradient_as_bucket_view, forward then moves each .grad into its new bucket)
        self._buckets, self._where = self._make_buckets(params, self.bucket_bytes_cap)

    def _attach_bucket_views(self):
        """gradient_as_bucket_view: each .grad is a view of its bucket, so backward accumulates into the bucket."""
        for b in self._buckets:
            for p, view in zip(b.params, b.views):
                if p.grad is None:
                    view.zero_()
                    p.grad = view
                elif p.grad.data_ptr() != view.data_ptr():  # set elsewhere (an optimizer, a user): moved in
                    view.copy_(p.grad)
                    p.grad = view

    def _prepare_for_backward(self, output):
        for b in self._buckets:
            b.pending = len(b.params)
            b.work = None
        self._next_launch = 0
        self._used = set()
        self._iteration_active = True
        if self.find_unused_parameters:
            reached = {_key(t) for t in _C._reachable_leaves(_tensors_in(output))}
            for b in self._buckets:
                for p in b.params:
                    if _key(p) not in reached:
                        self._mark_ready(p, used=False)

    def _check_previous_reduction(self):
        if not self._iteration_active:
            return
        started = self._next_launch > 0 or any(b.pending < len(b.params) for b in self._buckets)
        if started and self._next_launch < len(self._buckets):
            missing = [self._param_names[_key(p)] for b in self._buckets for p in b.params if _key(p) not in self._used]
            self._iteration_active = False
            raise RuntimeError(
                "Expected to have finished reduction in the prior iteration before starting a new one. This error "
                "indicates that your module has parameters that were not used in producing loss. You can enable "
                "unused parameter detection by passing the keyword argument `find_unused_parameters=True` to "
                "`torch.nn.parallel.DistributedDataParallel`, and by making sure all `forward` function outputs "
                f"participate in calculating loss. Parameters which did not receive grad: {', '.join(missing)}")
        self._iteration_active = False

    # --- backward: buckets ------------------------------------------------------------------------------------
    def _grad_ready(self, param):
        if not (self._iteration_active and self.require_backward_grad_sync):
            return
        if _key(param) in self._used:
            raise RuntimeError(f"DistributedDataParallel: parameter {self._param_names[_key(param)]} received its "
                               "gradient twice in one backward (reentrant backward or a parameter used in two "
                               "graphs); this is not supported")
        self._mark_ready(param, used=True)

    def _mark_ready(self, param, used):
        bucket, i = self._where[_key(param)]
        if used:
            self._used.add(_key(param))
            if not self._has_rebuilt:
                self._arrival.append(self._index[_key(param)])
        bucket.claim()
        view = bucket.views[i]
        grad = param.grad
        # The all-reduce reads each gradient where backward left it (the communication thread copies it in; on
        # one machine straight into the shared-memory slot), so no pass copies it into the bucket first. A
        # missing gradient is a zero in the bucket; one the all-reduce cannot read as it is (strided, another
        # dtype) is copied into the bucket, and the bucket's own view is read.
        if grad is None:
            view.zero_()
            piece = view
        elif self.gradient_as_bucket_view and grad.data_ptr() == view.data_ptr():
            piece = view
        elif grad.dtype == bucket.dtype and grad.is_contiguous() and grad.numel() == view.numel():
            piece = grad
        else:
            view.copy_(grad)
            piece = view
        bucket.pieces[i] = piece
        bucket.pending -= 1
        while self._next_launch < len(self._buckets) and self._buckets[self._next_launch].pending == 0:
            b = self._buckets[self._next_launch]
            b.work = dist._all_reduce_gathered(b.buffer, b.pieces, op=dist.ReduceOp.AVG, group=self.process_group)
            b.pieces = [None] * len(b.params)
            self._next_launch += 1
        if self._next_launch == len(self._buckets):
            self._finish()

    def _finish(self):
        for b in self._buckets:
            b.work.wait()  # the stream waits; the host goes on
            # The all-reduce (AVG: the sum over the ranks, then / world, as one process dividing accumulated
            # gradients does) leaves the average in the bucket, and each .grad becomes its view of it.
            # gradient_as_bucket_view: the bucket is each .grad already and stays. Otherwise the bucket is handed
            # to the .grads and the next step fills a fresh one, so that no pass copies the average back into
            # the tensors the local backward made (torch does; docs/distributed.md, "Data parallel").
            for p, view in zip(b.params, b.views):
                if p.grad is None and self.find_unused_parameters and _key(p) not in self._used:
                    continue  # unused this step: no gradient, as torch
                if p.grad is None or p.grad.data_ptr() != view.data_ptr():
                    p.grad = view
            if not self.gradient_as_bucket_view:
                b.hand_over()
        self._iteration_active = False

    # --- torch's API ------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def no_sync(self):
        """Gradients accumulate locally (no communication) inside; the first backward after it averages them."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def __getstate__(self):
        raise TypeError("DistributedDataParallel cannot be pickled; save ddp.module.state_dict() instead")


def _key(t):
    return _C._tensor_key(t)


def _tensors_in(output):
    from .. import Tensor
    if isinstance(output, Tensor):
        return [output]
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        return [t for o in output for t in _tensors_in(o)]
    return []


class DataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        raise NotImplementedError("DataParallel (single-process, several GPUs) needs CUDA; on the CPU use "
                                  "DistributedDataParallel under mpirun")
