"""A fake torch (tests/test_compat_sglang_memory.py, tests/vm/test_vm_memory.py): :func:`fake_torch` records what
SGLang's memory helpers ask of it (``torch.empty`` with ``pin_memory``, ``torch.frombuffer``,
``cudaHostRegister``/``cudaHostUnregister``) over real memory (ctypes buffers). Light: the guest imports it."""

from __future__ import annotations

import ctypes
import types


class FakeTensor:
    SIZES = {"uint8": 1, "float16": 2, "float32": 4}

    def __init__(self, raw, dtype, numel=None, shape=None, pinned=False):
        self.raw, self.dtype, self.pinned = raw, dtype, pinned
        self.numel = numel if numel is not None else ctypes.sizeof(raw) // self.SIZES[dtype]
        self.shape = shape if shape is not None else (self.numel,)

    def element_size(self):
        return self.SIZES[self.dtype]

    def view(self, *args):
        if len(args) == 1 and isinstance(args[0], str):
            return FakeTensor(self.raw, args[0])
        assert self.numel == eval("*".join(map(str, args)) or "1")
        return FakeTensor(self.raw, self.dtype, self.numel, tuple(args), self.pinned)

    def __getitem__(self, cut):
        return FakeTensor(self.raw, self.dtype, len(range(self.numel)[cut]), None, self.pinned)

    def data_ptr(self):
        return ctypes.addressof(self.raw)


def fake_torch(register_rc: int = 0, unregister_rc: int = 0) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.calls = []
    torch.uint8, torch.float16, torch.float32 = "uint8", "float16", "float32"

    def empty(shape, dtype, device="cpu", pin_memory=False):
        torch.calls.append(("empty", tuple(shape), dtype, device, pin_memory))
        numel = 1
        for d in shape:
            numel *= d
        return FakeTensor((ctypes.c_uint8 * max(1, numel * FakeTensor.SIZES[dtype]))(), dtype, numel,
                          tuple(shape), pin_memory)

    def frombuffer(raw, dtype):
        torch.calls.append(("frombuffer", ctypes.addressof(raw), ctypes.sizeof(raw), dtype))
        return FakeTensor(raw, dtype)

    class Cudart:
        def cudaHostRegister(self, ptr, nbytes, flags):  # noqa: N802 - CUDA's name
            torch.calls.append(("register", ptr, nbytes, flags))
            return register_rc

        def cudaHostUnregister(self, ptr):  # noqa: N802
            torch.calls.append(("unregister", ptr))
            return unregister_rc

    torch.empty, torch.frombuffer = empty, frombuffer
    torch.cuda = types.SimpleNamespace(cudart=Cudart, is_initialized=lambda: False,
                                       synchronize=lambda: torch.calls.append(("synchronize",)))
    return torch
