"""ptc.save / ptc.load: collective save and load of a training job's state
(parameters, optimizer state, training-state record) over a torch.distributed
process group, binding the training-state checkpoint API of libptc
(include/ptc/ckpt.h).

What is here now is the Python half that does not depend on that API:
turning ``state`` (numpy arrays, CPU torch tensors, DTensors) into pointers,
dtypes and shapes without copies, and checking every local shape against
the layout of the configuration (a mismatch names the tensor and both
shapes). The C calls (begin a version, write this rank's shards, gather the
shard descriptors on rank 0 over the group as tensors of bytes, commit;
read a rank's boxes for any configuration) land with ckpt.h: see the
``_ckpt_*`` hooks below and docs/python.md, "save and load".
"""

from . import _arrays, _errors
from . import _lib as L
from .layout import Layout

# The libptc functions ptc.save / ptc.load need. They are not in the library
# yet; _lib.lib().has(name) tells when they are.
CKPT_FUNCTIONS = ()


def _is_dtensor(x):
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return False
    return isinstance(x, DTensor)


def check_local(layout, refs, rank, dtypes=None):
    """Compare every local array of @p refs with @p layout's shard of @p rank.
    Returns [(name, ref, shard)] in layout order; raises InvalidError."""
    out = []
    for name in layout.names():
        if name not in refs:
            continue
        sh = layout.shard(name, rank)
        ref = refs[name]
        if not sh.present:
            raise _errors.InvalidError("tensor '%s' is not held by rank %d under %s"
                                       % (name, rank, layout.config))
        if ref.dtype != sh.dtype:
            raise _errors.InvalidError("tensor '%s' has dtype %s; the checkpoint's is %s"
                                       % (name, ref.dtype, sh.dtype))
        if tuple(ref.shape) != tuple(sh.shape):
            raise _errors.InvalidError(
                "tensor '%s' on rank %d: local shape %s, but the layout of %s gives %s"
                % (name, rank, list(ref.shape), layout.config, list(sh.shape)))
        out.append((name, ref, sh))
    unknown = sorted(set(refs) - set(layout.names()))
    if unknown:
        raise _errors.NotFoundError("tensor '%s' is not in the layout" % unknown[0])
    return out


def _ckpt_missing(what):
    return _errors.UnsupportedError(
        "%s needs the training-state checkpoint API of libptc (include/ptc/ckpt.h), "
        "which the loaded library (%s) does not have yet" % (what, L.library_path()))


def save(store, state, *, config, rules, rank, group=None, step=None, meta=None,
         global_shapes=None):
    """Save this rank's local tensors as part of a new version (collective over
    @p group). Not available until libptc has include/ptc/ckpt.h; the local
    shapes are checked first, so a wrong state fails the same way now and
    then."""
    if global_shapes is None:
        global_shapes = {}
    specs = {}
    refs = {}
    for name, x in state.items():
        ref = _arrays.array_ref(x, what="tensor '%s'" % name)
        refs[name] = ref
        g = global_shapes.get(name)
        if g is None and _is_dtensor(x):
            g = tuple(x.shape)
        if g is None:
            raise _errors.InvalidError("tensor '%s': its global shape is unknown (give a "
                                       "DTensor or global_shapes)" % name)
        specs[name] = (ref.dtype, tuple(g))
    lay = Layout(specs, config, rules)
    try:
        check_local(lay, refs, rank)
    finally:
        lay.close()
    raise _ckpt_missing("ptc.save")


def load(store, state, *, config, rank, version=None):
    """Fill this rank's local tensors of @p state in place from a stored version
    under @p config. Not available until libptc has include/ptc/ckpt.h."""
    for name, x in state.items():
        _arrays.array_ref(x, writable=True, what="tensor '%s'" % name)
    raise _ckpt_missing("ptc.load")
