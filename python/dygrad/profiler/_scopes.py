"""Module scopes and garbage-collector pauses while a profiler records (docs/profiler-python.md, "Per-module
costs", "GC pauses").

nn.Module.__call__ tests `TRACKING[0]` (one list read when off); while a profile(with_modules=True) session
records, each call runs under a module scope: an id the C++ profiler attaches to every Task the call enqueues
and to every autograd node it records (whose backward Tasks then land on the same module, flagged backward).
"""
import gc
import threading
import weakref

from .. import _C

TRACKING = [False]

# scope id -> (path, type name, parent scope id); ids start at 1 and are kept for the process (a module keeps
# its id across sessions); (parent id, id(module)) -> scope id. Python reuses the id() of a freed object, so
# every entry keyed by id() is checked against the weakref of the module it was made for (_alive) before it is
# trusted: a new module at a dead one's address gets its own scope, path and name.
_scopes = {}
_by_key = {}
_names = {}   # (id(parent module), id(child)) -> (weakref to the parent, weakref to the child, attribute name)
_module_of = {}  # scope id -> weakref to its module
_first_scope = {}  # id(module) -> the first scope it ran in


def _ref(obj):
    try:
        return weakref.ref(obj)
    except TypeError:  # a module class with __slots__ and no __weakref__: trusted by id() alone
        return None


def _alive(ref, obj):
    """Whether an entry made for `ref` still describes `obj` (not a dead object whose id() `obj` reuses)."""
    return ref is None or ref() is obj
BACKWARD = 0x80000000


def scopes():
    return dict(_scopes)


def _child_name(parent, module):
    key = (id(parent), id(module))
    entry = _names.get(key)
    if entry is not None and _alive(entry[0], parent) and _alive(entry[1], module):
        return entry[2]
    name = ""
    for n, m in parent.__dict__.get("_modules", {}).items():
        if m is module:
            name = n
            break
    else:  # called through a container the parent never calls (ModuleList, ModuleDict): "layers.0"
        try:
            for n, m in parent.named_modules():
                if m is module and n:
                    name = n
                    break
        except Exception:  # a module whose traversal fails still gets a scope
            pass
    _names[key] = (_ref(parent), _ref(module), name)
    return name


_local = threading.local()  # .stack: the module objects of the calling thread's open scopes


def _scope_of(module, parent_scope, stack):
    key = (parent_scope, id(module))
    sid = _by_key.get(key)
    if sid is not None and not _alive(_module_of.get(sid), module):
        sid = None  # the key's module died and this one took its address
    if sid is None:
        tname = type(module).__name__
        parent = stack[-1] if stack else None
        if parent is None and parent_scope in _module_of:
            parent = _module_of[parent_scope]()
        if parent_scope and parent is not None:
            name = _child_name(parent, module) or tname
            path = _scopes[parent_scope][0] + "." + name
        else:
            path = tname
        sid = len(_scopes) + 1
        _scopes[sid] = (path, tname, parent_scope)
        _by_key[key] = sid
        first = _first_scope.get(id(module))
        if first is None or not _alive(_module_of.get(first), module):
            _first_scope[id(module)] = sid
        _module_of[sid] = _ref(module)
    return sid


def call(module, args, kwargs):
    """nn.Module.__call__ while tracking: the module's forward under its scope."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    current = _C._profiler_module_scope()
    first = _first_scope.get(id(module)) if current & BACKWARD else None
    if first is not None and _alive(_module_of.get(first), module):
        # Called inside a backward (a checkpoint's recompute): its Tasks are the module's backward cost.
        scope = first | BACKWARD
    else:
        scope = _scope_of(module, current & ~BACKWARD, stack)
    previous = _C._profiler_set_module_scope(scope)
    stack.append(module)
    try:
        return module._call_unscoped(*args, **kwargs)
    finally:
        stack.pop()
        _C._profiler_set_module_scope(previous)


# --- garbage-collector pauses --------------------------------------------------------------------------------
GC_RANGE_PREFIX = "python gc"


def _gc_callback(phase, info):
    if not _C._profiler_recording():
        return
    if phase == "start":
        _C._record_function_enter(f"{GC_RANGE_PREFIX} (generation {info.get('generation', '?')})")
    else:
        _C._record_function_exit()


def start(with_modules):
    TRACKING[0] = bool(with_modules)
    if _gc_callback not in gc.callbacks:
        gc.callbacks.append(_gc_callback)


def stop():
    TRACKING[0] = False
    if _gc_callback in gc.callbacks:
        gc.callbacks.remove(_gc_callback)
