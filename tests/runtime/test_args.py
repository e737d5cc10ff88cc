"""Argument reading and checking for GPU launches (no GPU needed)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxdsl import Tile
from ptxdsl.core.errors import LaunchError
from ptxdsl.runtime import adapter as rad
from ptxdsl.runtime import args as ra
from ptxdsl.core.types import b16, b32, bf16, f16, f32, s32, u32
from runtime_kernels import build_scale_rows, build_vadd, build_vadd4
from seed_kernels import build_rms_norm


def sig_of(k):
    return ra.KernelSignature.of(k, k.program())


def np_view(a):
    return rad.view_of(a, "numpy")


class CAI:
    """An object exposing only __cuda_array_interface__ (like numba or jax)."""

    def __init__(self, shape, typestr="<f4", ptr=0x7000_0000, strides=None, stream=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3, "stream": stream}


def cai_view(obj, device=0):
    return rad.view_of(obj, rad.classify(obj), pointer_device=lambda p: device)


def tview(t):
    return rad.view_of(t, "torch")


# ---------------------------------------------------------------- dtypes
@pytest.mark.parametrize("tile,name,kind,ok", [
    (f32, "float32", "torch", True), (f32, "float16", "torch", False),
    (bf16, "bfloat16", "torch", True), (bf16, "uint16", "numpy", True),
    (bf16, "uint16", "torch", False), (f16, "float16", "numpy", True),
    (u32, "uint32", "torch", True), (u32, "int32", "torch", False), (s32, "int32", "cai", True),
    (b32, "float32", "torch", True), (b32, "int32", "torch", True),
    (b32, "float16", "torch", False),
    (b16, "bfloat16", "torch", True),
])
def test_dtype_acceptance(tile, name, kind, ok):
    assert ra.accepts_dtype(tile, name, kind) is ok


def test_output_dtypes():
    assert ra.dtype_name_for_tile(f32) == "float32"
    assert ra.dtype_name_for_tile(bf16) == "bfloat16"
    assert ra.dtype_name_for_tile(b32) == "uint32"


# ---------------------------------------------------------------- signatures
def test_signature_of_vadd():
    sig = sig_of(build_vadd())
    assert sig.arg_names == ("A", "B", "C") and sig.n_in == 2 and sig.n_out == 1
    assert sig.dim_names == ("N",)
    assert sig.describe_call() == "vadd(A, B) -> C"
    assert [p.kind for p in sig.params] == ["ptr", "ptr", "ptr", "dim"]


def test_vector_alignment_finds_v4_tensors():
    assert ra.vector_alignment(build_vadd4().program()) == {
        "A": (16, "ld.global.v4.f32"), "B": (16, "ld.global.v4.f32"),
        "C": (16, "st.global.v4.f32")}
    # Scalar f32 accesses need only what every f32 array has.
    assert all(w == 4 for w, _ in ra.vector_alignment(build_vadd().program()).values())


def test_vector_alignment_of_the_seed_rmsnorm():
    need = ra.vector_alignment(build_rms_norm(4, 1024).program())
    assert {k: v[0] for k, v in need.items()} == {"X": 16, "W": 16, "Y": 16}


# ---------------------------------------------------------------- binding
def test_bind_infers_dims_and_output_shape():
    sig = sig_of(build_vadd())
    a = np.zeros(1000, np.float32)
    b = ra.bind(sig, [np_view(a), np_view(a), None])
    assert b.dims == {"N": 1000} and b.out_shapes == [(1000,)] and b.device == -1


def test_dtype_mismatch_names_argument_and_fix():
    sig = sig_of(build_vadd())
    with pytest.raises(LaunchError, match=r"input B \(argument 2\) has dtype float16 but "
                       r"Tile\('N', f32\) needs float32"):
        ra.bind(sig, [np_view(np.zeros(8, np.float32)), np_view(np.zeros(8, np.float16)), None])


def test_signedness_hint():
    k = build_vadd()
    sig = sig_of(k)
    sig.specs = (Tile("N", u32),) * 3
    with pytest.raises(LaunchError, match="signedness differs"):
        ra.bind(sig, [np_view(np.zeros(8, np.int32))] * 2 + [None])


def test_wrong_rank():
    sig = sig_of(build_vadd())
    with pytest.raises(LaunchError,
                       match=r"has 2 dims \(shape \(2, 4\)\) but Tile\('N', f32\) has 1"):
        ra.bind(sig, [np_view(np.zeros((2, 4), np.float32))] * 2 + [None])


def test_fixed_dim_mismatch():
    sig = sig_of(build_rms_norm(4, 1024))
    x = np.zeros((4, 512), np.float32)
    with pytest.raises(LaunchError, match=r"input X .* fixes axis 1 to 1024"):
        ra.bind(sig, [np_view(x), np_view(np.zeros(1024, np.float32)), None])


def test_named_dim_conflict_says_where_it_was_set():
    sig = sig_of(build_vadd())
    with pytest.raises(LaunchError, match=r"input B .* N=7, but A \(axis 0\) gave N=8"):
        ra.bind(sig, [np_view(np.zeros(8, np.float32)), np_view(np.zeros(7, np.float32)), None])


def test_explicit_output_shape_is_checked():
    sig = sig_of(build_vadd())
    a = np_view(np.zeros(8, np.float32))
    with pytest.raises(LaunchError, match=r"output C \(argument 3\)"):
        ra.bind(sig, [a, a, np_view(np.zeros(9, np.float32))])


def test_non_contiguous_device_array_is_refused(torch):
    sig = sig_of(build_rms_norm(4, 1024))
    x = torch.tensor_on(np.zeros((4, 2048), np.float32))[:, ::2]
    w = torch.tensor_on(np.zeros(1024, np.float32))
    with pytest.raises(LaunchError, match=r"is not contiguous .*\.contiguous\(\)"):
        ra.bind(sig, [tview(x), tview(w), None])


def test_numpy_layout_is_free(torch):
    # Host arrays are staged through a contiguous device copy, so any layout is fine.
    sig = sig_of(build_vadd())
    a = np.zeros(16, np.float32)[::2]
    assert ra.bind(sig, [np_view(a), np_view(a), None]).dims == {"N": 8}


def test_named_row_stride_accepts_row_slices(torch):
    sig = sig_of(build_scale_rows(64))
    wide = torch.tensor_on(np.zeros((8, 100), np.float32))
    b = ra.bind(sig, [tview(wide[:, 10:74]), None])
    assert b.dims == {"M": 8} and b.strides == {"sx": 100}
    # Contiguous input: the stride is the row length.
    b = ra.bind(sig, [tview(torch.tensor_on(np.zeros((8, 64), np.float32))), None])
    assert b.strides == {"sx": 64}
    # Numpy input: staged contiguous, so the stride is the row length too.
    b = ra.bind(sig, [np_view(np.zeros((8, 100), np.float32)[:, :64]), None])
    assert b.strides == {"sx": 64}


def test_named_row_stride_still_needs_contiguous_rows(torch):
    sig = sig_of(build_scale_rows(64))
    x = torch.tensor_on(np.zeros((8, 128), np.float32))[:, ::2]
    with pytest.raises(LaunchError, match="inner dims must be contiguous"):
        ra.bind(sig, [tview(x), None])


def test_cpu_torch_tensor_is_refused_with_advice(torch):
    sig = sig_of(build_vadd())
    t = torch.tensor_on(np.zeros(8, np.float32), -1)
    with pytest.raises(LaunchError, match=r"input A .* torch tensor on cpu; .*\.cuda\(\).*"
                                          r"PTXDSL_INTERPRET=1"):
        ra.bind(sig, [tview(t), tview(t), None])


def test_tensors_on_two_gpus_are_refused(torch):
    sig = sig_of(build_vadd())
    a = torch.tensor_on(np.zeros(8, np.float32), 0)
    b = torch.tensor_on(np.zeros(8, np.float32), 1)
    with pytest.raises(LaunchError, match="different GPUs .*A on cuda:0, B on cuda:1"):
        ra.bind(sig, [tview(a), tview(b), None])


def test_misaligned_vector_operand(torch):
    sig = sig_of(build_vadd4())
    flat = np.zeros(64 * 4 + 16, np.float32)
    start = (-flat.ctypes.data // 4) % 4  # the first 16-byte aligned element
    good = torch.tensor_on(flat[start:start + 256].reshape(64, 4))
    assert ra.bind(sig, [tview(good), tview(good), None]).dims == {"N": 64}
    # One float further: still 4-byte aligned, no longer 16.
    bad = torch.tensor_on(flat[start + 1:start + 1 + 256].reshape(64, 4))
    with pytest.raises(LaunchError, match=r"not 16-byte aligned.*ld.global.v4.f32"):
        ra.bind(sig, [tview(bad), tview(bad), None])


def test_missing_output_dim_needs_explicit_output():
    from ptxdsl import kernel, ptx

    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("M", f32),), grid=1, block=1)
    def odd(X, Y):
        ptx.global_ptrs(X, Y)

    sig = sig_of(odd)
    with pytest.raises(LaunchError, match=r"output Y .* dim\(s\) M are not fixed by any input"):
        ra.bind(sig, [np_view(np.zeros(4, np.float32)), None])
    b = ra.bind(sig, [np_view(np.zeros(4, np.float32)), np_view(np.zeros(6, np.float32))])
    assert b.dims == {"N": 4, "M": 6}


def test_dim_too_large_for_u32():
    sig = sig_of(build_vadd())
    v = rad.ArgView(None, "cai", (2**32,), None, "float32", 0, 0x1000)
    with pytest.raises(LaunchError, match="does not fit the kernel's .u32 parameter"):
        ra.bind(sig, [v, v, None])


# ---------------------------------------------------------------- reading arrays
def test_classify():
    assert rad.classify(np.zeros(3)) == "numpy"
    assert rad.classify(CAI((3,))) == "cai"
    assert rad.classify([1, 2, 3]) == ""
    assert rad.classify(3.0) == ""


def test_classify_torch(torch):
    assert rad.classify(torch.tensor_on(np.zeros(3, np.float32))) == "torch"


def test_cai_view_reads_shape_dtype_strides_stream():
    v = cai_view(CAI((4, 8), "<f4", ptr=0x1000, strides=(64, 4), stream=7), device=2)
    assert (v.shape, v.dtype, v.strides, v.ptr, v.device, v.stream) == (
        (4, 8), "float32", (16, 1), 0x1000, 2, 7)


def test_cai_rejects_odd_byte_strides():
    with pytest.raises(rad.ArgProblem, match="not multiples of its itemsize"):
        cai_view(CAI((4,), "<f4", strides=(6,)))


def test_cai_rejects_big_endian():
    with pytest.raises(rad.ArgProblem, match="big-endian"):
        cai_view(CAI((4,), ">f4"))


class CudaDLPack:
    """A DLPack producer that claims a CUDA device; its capsule is numpy's (real DLTensor)."""

    def __init__(self, array, device=0):
        self.a = array
        self.device = device
        self.streams = []

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return (2, self.device)


def test_dlpack_view_reads_the_capsule():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:3]
    prod = CudaDLPack(a)
    assert rad.classify(prod) == "dlpack"
    v = rad.view_of(prod, "dlpack", stream=0)
    assert v.shape == (3, 2) and v.dtype == "float32" and v.ptr == a.ctypes.data
    assert v.strides == (4, 1)
    assert prod.streams == [1]  # DLPack's name for the legacy default stream
    rad.view_of(prod, "dlpack", stream=1234)
    assert prod.streams[-1] == 1234


def test_dlpack_on_the_cpu_is_refused():
    class HostDLPack(CudaDLPack):
        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(rad.ArgProblem, match="not CUDA"):
        rad.view_of(HostDLPack(np.zeros(3, np.float32)), "dlpack")


def test_torch_view(torch):
    t = torch.tensor_on(np.zeros((4, 6), np.float32), 1)
    v = tview(t)
    assert (v.kind, v.shape, v.strides, v.dtype, v.device, v.ptr) == (
        "torch", (4, 6), (6, 1), "float32", 1, t.data_ptr())


def test_sparse_torch_tensor_is_refused(torch):
    t = torch.Tensor(np.zeros(4, np.float32), 0, layout=torch.sparse_coo)
    with pytest.raises(rad.ArgProblem, match="to_dense"):
        tview(t)


# ---------------------------------------------------------------- streams
def test_stream_handles():
    class TorchStream:
        cuda_stream = 0x55

    class CupyStream:
        ptr = 0x66

    class CoreStream:
        def __cuda_stream__(self):
            return (0, 0x77)

    class BindingsStream:
        def __int__(self):
            return 0x88

    assert rad.stream_handle(None) == 0
    assert rad.stream_handle(0x44) == 0x44
    assert rad.stream_handle(TorchStream()) == 0x55
    assert rad.stream_handle(CupyStream()) == 0x66
    assert rad.stream_handle(CoreStream()) == 0x77
    assert rad.stream_handle(BindingsStream()) == 0x88
    with pytest.raises(LaunchError, match="stream= takes"):
        rad.stream_handle("default")
