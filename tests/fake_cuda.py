"""A simulated second device on the CPU: tensors or random generators of two devices that meet raise, as on CUDA.

Code that makes a tensor or a `torch.Generator` on the default device (the CPU) and hands it to a model on a GPU
fails only on a GPU. This module catches that class of bug on a CPU-only machine: inside `simulated_device()`,
`model.to(DEVICE)` moves a model to a second device, and then

  - every tensor there is an `OnDevice` tensor: it reports `DEVICE` as its device and computes on the CPU data it
    wraps (a dispatch mode runs every operation on the wrapped data);
  - an operation whose tensors sit on both devices raises DeviceMismatch, as CUDA does (a 0-dim CPU tensor may meet
    the device, as a CUDA kernel takes a CPU scalar; so may CPU indices, as CUDA indexing takes them);
  - a factory asked for `device=DEVICE` makes its tensor there; `torch.Generator(device=DEVICE)` gives a
    DeviceGenerator, and a generator used by an operation on the other device's tensors raises DeviceMismatch;
  - a DeviceGenerator's state is not a CPU generator's state (nor the other way round): `set_state` with the other
    kind raises, as a CUDA generator given a CPU generator's state does;
  - `tensor.numpy()` and friends need the tensor on the CPU first, as on CUDA.

DEVICE is torch's `meta` device type: a device that every CPU build of torch has (autograd works across it), whose
own kernels never run here (the dispatch mode computes everything on the wrapped CPU data). The code under test sees
a device whose type is neither "cpu" nor "cuda", so it takes its non-CPU paths and none of its CUDA-only ones.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.overrides import TorchFunctionMode

DEVICE = torch.device("meta")
REAL_GENERATOR = torch._C.Generator
# ops whose CUDA kernels take CPU tensors beside device tensors: copies between devices, and indices
CROSSING = {"aten::copy_", "aten::_to_copy", "aten::index", "aten::index_put_", "aten::index_put",
            "aten::_index_put_impl_", "aten::_local_scalar_dense"}
STATE_TAG = torch.tensor(list(b"simulated-device"), dtype=torch.uint8)  # heads a DeviceGenerator's state


class DeviceMismatch(RuntimeError):
    """Tensors or a generator of two devices met in one operation."""


class OnDevice(torch.Tensor):
    """A tensor on the simulated device: its data is the CPU tensor `elem`."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        out = torch.Tensor._make_wrapper_subclass(cls, elem.shape, strides=elem.stride(),
                                                  storage_offset=elem.storage_offset(), dtype=elem.dtype,
                                                  device=DEVICE, requires_grad=elem.requires_grad)
        out.elem = elem
        return out

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise DeviceMismatch(f"{func} on a simulated-device tensor outside simulated_device()")

    def __repr__(self):
        return f"OnDevice({self.elem!r})"

    def numpy(self, *args, **kwargs):
        raise TypeError(f"can't convert {DEVICE.type} device type tensor to numpy. Use Tensor.cpu() to copy the "
                        "tensor to host memory first.")


def _is_device(device) -> bool:
    return device is not None and torch.device(device).type == DEVICE.type


class DeviceGenerator(REAL_GENERATOR):
    """A random generator of the simulated device (its stream is a CPU generator's; its state is tagged)."""

    @property
    def device(self):
        return DEVICE

    def get_state(self):
        return torch.cat([STATE_TAG, super().get_state()])

    def set_state(self, state):
        tag = len(STATE_TAG)
        if state.numel() <= tag or not torch.equal(state[:tag].cpu(), STATE_TAG):
            raise RuntimeError("RNG state is wrong size (not a state of this device's generator)")
        super().set_state(state[tag:].cpu().clone())
        return self


class _GeneratorClass(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, REAL_GENERATOR)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, REAL_GENERATOR)


class Generator(metaclass=_GeneratorClass):
    """What `torch.Generator` is inside simulated_device(): a DeviceGenerator for DEVICE, else torch's own."""

    def __new__(cls, device="cpu"):
        return DeviceGenerator() if _is_device(device) else REAL_GENERATOR(device)


def _map(fn, value):
    """fn applied to every leaf of nested tuples, lists and dicts (an operation's arguments)."""
    if isinstance(value, (tuple, list)):
        return type(value)(_map(fn, v) for v in value)
    if isinstance(value, dict):
        return {k: _map(fn, v) for k, v in value.items()}
    return fn(value)


def _leaves(value):
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _leaves(v)]
    return list(value.values()) if isinstance(value, dict) else [value]


def _device_of(value) -> torch.device:
    return DEVICE if isinstance(value, (OnDevice, DeviceGenerator)) else value.device


FROM_DATA = (torch.tensor, torch.as_tensor, torch.asarray)  # they build on the CPU and copy below the dispatch mode
INDEXING = (torch.Tensor.__getitem__, torch.Tensor.__setitem__)


def _list_index(index):
    """A list in an index as the CPU index tensor CUDA indexing takes (torch would make it on the device below the
    dispatch mode, without data)."""
    if isinstance(index, list):
        return torch.tensor(index)
    return tuple(_list_index(i) for i in index) if isinstance(index, tuple) else index


class _Functions(TorchFunctionMode):
    """A generator must be on the device of the tensors it draws for (or of the `device=` a factory is given);
    tensors made from Python data with `device=DEVICE` are made there."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FROM_DATA and _is_device(kwargs.get("device")):
            return func(*args, **{**kwargs, "device": "cpu"}).to(DEVICE)
        if func is torch.Tensor.tolist and isinstance(args[0], OnDevice):  # a copy to the host, as on CUDA
            return args[0].elem.tolist()
        if func in INDEXING and isinstance(args[0], OnDevice):  # torch makes a list index below the dispatch mode
            args = (args[0], _list_index(args[1]), *args[2:])
        values = _leaves((args, kwargs))
        generators = [v for v in values if isinstance(v, REAL_GENERATOR)]
        if generators:
            tensors = [v for v in values if isinstance(v, torch.Tensor)]
            where = (_device_of(tensors[0]) if tensors else
                     torch.device(kwargs["device"]) if kwargs.get("device") is not None else torch.device("cpu"))
            for generator in generators:
                if _device_of(generator).type != where.type:
                    raise DeviceMismatch(f"{getattr(func, '__name__', func)}: a {_device_of(generator).type} "
                                         f"generator draws for tensors on {where.type}")
        return func(*args, **kwargs)


class _Tensors(TorchDispatchMode):
    """Every operation runs on the CPU data; its result is on DEVICE when its inputs are (or it was asked to be)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        wrapped = {}
        plain = []

        def unwrap(value):
            if isinstance(value, OnDevice):
                wrapped[id(value.elem)] = value
                return value.elem
            if isinstance(value, torch.Tensor):
                if value.device.type == DEVICE.type:
                    raise DeviceMismatch(f"{func}: a {DEVICE.type} tensor without data (made outside "
                                         "simulated_device())")
                plain.append(value)
            return value

        args, kwargs = _map(unwrap, args), _map(unwrap, kwargs)
        name = func._schema.name
        if wrapped and name not in CROSSING and any(t.dim() > 0 for t in plain):
            shapes = [tuple(t.shape) for t in plain if t.dim() > 0]
            raise DeviceMismatch(f"{func}: tensors on {DEVICE.type} and on cpu (shapes {shapes}) meet; make every "
                                 "tensor on the model's device")
        target = kwargs.get("device")
        on_device = _is_device(target) if target is not None else bool(wrapped)
        if _is_device(target):
            kwargs["device"] = torch.device("cpu")
        if name == "aten::copy_":  # the destination keeps its device
            on_device = isinstance(args[0], torch.Tensor) and id(args[0]) in wrapped
        if name == "aten::histc" and not args[0].is_floating_point():  # CUDA counts integers; the CPU kernel floats
            out = func(args[0].float(), *args[1:], **kwargs).to(args[0].dtype)
        else:
            out = func(*args, **kwargs)
        if not on_device:
            return out
        return _map(lambda t: (wrapped[id(t)] if id(t) in wrapped else OnDevice(t)) if isinstance(t, torch.Tensor)
                        else t, out)


@contextmanager
def simulated_device():
    """Within the block, DEVICE is a second device: `model.to(DEVICE)` moves a model there (see the module's
    docstring for what raises)."""
    swap = torch.__future__.get_swap_module_params_on_conversion()
    # Module.to(dtype) would set `param.data`, which changes a wrapper's dtype but not the data it wraps: swap instead
    torch.__future__.set_swap_module_params_on_conversion(True)
    torch.Generator = Generator
    try:
        with _Tensors(), _Functions():
            yield DEVICE
    finally:
        torch.Generator = REAL_GENERATOR
        torch.__future__.set_swap_module_params_on_conversion(swap)
