"""The ops as torch.library custom ops on CPU tensors (through the interpreter):
torch.compile(fullgraph=True) keeps them, opcheck passes, autograd flows. Skips without torch."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ptxdsl.ops import matmul, register_torch_ops, rms_norm, rms_norm_backward  # noqa: E402

register_torch_ops()
EPS = 1e-6


def reference(x, w, eps=EPS):
    x64 = x.double()
    return (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w.double()).to(x.dtype)


def ops_in(fn, *args):
    """Run fn under torch.compile(fullgraph=True) and list the ptxdsl ops its graph holds."""
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if "ptxdsl" in str(n.target))
        return gm

    out = torch.compile(fn, fullgraph=True, backend=backend)(*args)
    return out, seen


def test_cpu_tensors_run_on_the_interpreter_and_stay_torch():
    x, w = torch.randn(3, 5, 64), torch.rand(64) + 0.5
    y = rms_norm(x, w)
    assert isinstance(y, torch.Tensor) and y.shape == x.shape and y.device.type == "cpu"
    torch.testing.assert_close(y, reference(x, w), rtol=1e-5, atol=1e-5)
    y, rstd = rms_norm(x, w, return_rstd=True)
    assert rstd.shape == (15,) and rstd.dtype == torch.float32


def test_cpu_autograd_matches_torch():
    x = torch.randn(4, 96, requires_grad=True)
    w = (torch.rand(96) + 0.5).requires_grad_()
    rms_norm(x, w).square().sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    reference(x2, w2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-4, atol=1e-5)


def test_compile_fullgraph_keeps_rms_norm_as_one_node():
    x, w = torch.randn(4, 64), torch.rand(64) + 0.5
    y, seen = ops_in(lambda x, w: rms_norm(x, w) * 2, x, w)
    assert seen == ["ptxdsl.rms_norm"]
    torch.testing.assert_close(y, 2 * reference(x, w), rtol=1e-5, atol=1e-5)


def test_compile_fullgraph_differentiates_through_the_op():
    x = torch.randn(4, 64, requires_grad=True)
    w = (torch.rand(64) + 0.5).requires_grad_()
    f = torch.compile(lambda x, w: rms_norm(x, w).sum(), fullgraph=True, backend="aot_eager")
    f(x, w).backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    reference(x2, w2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-4, atol=1e-5)


def test_compile_backward_function_and_matmul():
    x, w = torch.randn(2, 32), torch.rand(32) + 0.5
    _, rstd = rms_norm(x, w, return_rstd=True)
    dy = torch.randn(2, 32)
    (dx, dw), seen = ops_in(lambda *a: rms_norm_backward(*a), dy, x, w, rstd)
    assert seen == ["ptxdsl.rms_norm_backward"]
    assert dx.shape == x.shape and dw.shape == w.shape
    a, b = torch.randn(8, 16).half(), torch.randn(16, 8).half()
    out, seen = ops_in(lambda a, b: matmul(a, b, activation="relu"), a, b)
    assert seen == ["ptxdsl.matmul"]
    torch.testing.assert_close(out.float(), torch.relu(a.float() @ b.float()), rtol=1e-2,
                               atol=1e-2)


@pytest.mark.parametrize("shape", [(4, 64), (2, 3, 32)])
def test_opcheck_rms_norm(shape):
    x = torch.randn(*shape, requires_grad=True)
    w = (torch.rand(shape[-1]) + 0.5).requires_grad_()
    torch.library.opcheck(torch.ops.ptxdsl.rms_norm.default, (x, w, EPS))


def test_opcheck_rms_norm_backward():
    x, w = torch.randn(4, 64), torch.rand(64) + 0.5
    _, rstd = rms_norm(x, w, return_rstd=True)
    torch.library.opcheck(torch.ops.ptxdsl.rms_norm_backward.default,
                          (torch.randn(4, 64), x, w, rstd))


def test_opcheck_matmul():
    a = torch.randn(8, 16).half().requires_grad_()
    b = torch.randn(16, 8).half().requires_grad_()
    bias = torch.randn(8).half().requires_grad_()
    torch.library.opcheck(torch.ops.ptxdsl.matmul.default, (a, b, bias, None, None))
    torch.library.opcheck(torch.ops.ptxdsl.matmul.default,
                          (a.detach(), b.detach(), None, "silu", torch.float32))


def test_compile_residual_and_out_forms():
    x, w = torch.randn(3, 64), torch.rand(64) + 0.5
    r = torch.randn(3, 64)
    r_eager, out_eager = r.clone(), torch.empty(3, 64)
    rms_norm(x, w, residual=r_eager, out=out_eager)
    out = torch.empty(3, 64)
    _, seen = ops_in(lambda x, w, r, o: rms_norm(x, w, residual=r, out=o), x, w, r, out)
    assert seen == ["ptxdsl.rms_norm"]
    torch.testing.assert_close(r, r_eager)
    torch.testing.assert_close(out, out_eager)


def test_eager_call_does_not_ask_whether_it_is_compiling(monkeypatch):
    # The eager functions are unchanged: dynamo traces stand-ins instead (no per-call cost).
    def boom():
        raise AssertionError("asked")
    monkeypatch.setattr(torch.compiler, "is_compiling", boom)
    x, w = torch.randn(2, 32), torch.rand(32) + 0.5
    rms_norm(x, w)


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="torch without float8")
def test_compile_and_opcheck_fp8_matmul():
    """float8 operands with scales: torch.compile(fullgraph=True) holds one
    ptxdsl.matmul_scaled node (numbers become scale tensors); opcheck passes."""
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-4, 5, (8, 32), generator=g).float().to(torch.float8_e4m3fn)
    b = torch.randint(-4, 5, (32, 16), generator=g).float().to(torch.float8_e5m2)
    sa = torch.tensor([0.5])
    want = a.double() @ b.double() * 0.5 * 0.25
    out, seen = ops_in(lambda a, b, sa: matmul(a, b, scale_a=sa, scale_b=0.25,
                                               out_dtype=torch.float32), a, b, sa)
    assert seen == ["ptxdsl.matmul_scaled"]
    assert torch.equal(out.double(), want)
    out, seen = ops_in(lambda a, b: matmul(a, b), a, b)          # no scales: bf16 out
    assert seen == ["ptxdsl.matmul_scaled"] and out.dtype == torch.bfloat16
    # test_schema compares outputs through arithmetic that torch has no float8 kernels for
    torch.library.opcheck(torch.ops.ptxdsl.matmul_scaled.default,
                          (a, b, None, "relu", torch.float32, sa, None),
                          test_utils=("test_faketensor", "test_aot_dispatch_static"))
