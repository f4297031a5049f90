"""What autograd saves for backward during a forward, in bytes: the measurement both
calibration scripts pin the estimator's activation terms to (run under torch, never in CI).

Each saved storage counts once; the model's parameters and buffers belong to the model, not
to the activations (a saved view of a buffer would otherwise count the whole table), and so do
autocast's casts of parameters (what the estimator counts as weight copies)."""
import torch


def model_storages(model):
    """Data pointers of the model's parameters and buffers."""
    return {p.untyped_storage().data_ptr() for p in list(model.parameters()) + list(model.buffers())}


def saved_during(model, run, autocast=False):
    """(bytes autograd saved while `run()` ran, what `run()` returned)."""
    params = model_storages(model)
    seen = {}
    casts = set()

    class Casts(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if (
                func is torch.ops.aten._to_copy.default
                and isinstance(args[0], torch.Tensor)
                and args[0].untyped_storage().data_ptr() in params
            ):
                casts.add(out.untyped_storage().data_ptr())
            return out

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in params and ptr != 0:
            seen[ptr] = (st.nbytes(), t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), Casts():
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = run()
        else:
            out = run()
    return sum(n for ptr, (n, _) in seen.items() if ptr not in casts), out
