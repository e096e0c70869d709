"""``revbench.interop.to_torch``: a reversible function as a PyTorch operation.

Oracles: ``torch.autograd.gradcheck`` (finite differences, float64), ``revbench.grad`` /
``revbench.vjp`` on the same function, and PyTorch's own derivatives of the same formula
written with torch operations; both backends.
"""

from __future__ import annotations

import numpy as np
import pytest
from interop_programs import DIRTY, RESID

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'revbench[interop]')")

import revbench  # noqa: E402
from revbench import ReversibilityError  # noqa: E402
from revbench.interop import to_torch  # noqa: E402

D = torch.float64


@pytest.fixture(params=["jacobian-in-forward", "pullback"])
def path(request, monkeypatch):
    """How an eager gradient is taken: small outputs' Jacobian computed with the forward
    pass (the backward pass is a product with it), or the pullback operator."""
    if request.param == "pullback":
        import revbench.interop.torch as rb_torch

        monkeypatch.setattr(rb_torch, "JACOBIAN_IN_FORWARD", 0)
    return request.param


def tensors(grad=True):
    return (torch.zeros(3, dtype=D, requires_grad=grad), torch.tensor(0.5, dtype=D, requires_grad=grad),
            torch.tensor([1.0, 10.0, -2.0], dtype=D, requires_grad=grad),
            torch.tensor([1.5, 2.0, -0.5], dtype=D, requires_grad=grad), 2, True)


def torch_resid(r, s, a, x, n, flag):
    r = r + a * x * x + torch.sin(s)
    s = s + (x[:n] * a[:n]).sum() + (1.0 if flag else 0.0)
    return r, s


def test_gradcheck_several_outputs(make, path):
    f = make(RESID)
    tf = to_torch(f, outputs=("r", "s"))
    assert torch.autograd.gradcheck(tf, tensors())
    assert torch.autograd.gradcheck(lambda *a: tf(*a, 3, False), tensors()[:4])


def test_opcheck(make):
    f = make(RESID)
    tf = to_torch(f, outputs="r")
    r, s, a, x, n, flag = tensors()
    torch.library.opcheck(tf.op, (r, s, a, x, torch.tensor(n), torch.tensor(flag)))


def test_backward_matches_revbench_and_torch(make, path):
    f = make(RESID)
    tf = to_torch(f, outputs="s")
    args = tensors()
    keep = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    s = tf(*args)
    assert s.shape == () and s.dtype == D and s.requires_grad  # a scalar stays a scalar
    s.backward()
    g = revbench.grad(f, loss="s")(np.zeros(3), 0.5, np.array([1.0, 10.0, -2.0]),
                                   np.array([1.5, 2.0, -0.5]), 2, True)
    for t, ref in zip(args[:4], g[:4]):
        np.testing.assert_allclose(t.grad.numpy(), ref, rtol=1e-13)
    ref_args = tensors()
    torch_resid(*ref_args)[1].backward()
    for t, ref in zip(args[:4], ref_args[:4]):  # (s does not depend on r: None there)
        torch.testing.assert_close(t.grad, torch.zeros_like(t) if ref.grad is None else ref.grad)
    for a, b in zip(args, keep):  # the caller's tensors keep their values
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a.detach(), b)


def test_int_and_bool_tensors_pass_through(make, path):
    f = make(RESID)
    tf = to_torch(f, outputs=("s", "n"))
    r, s, a, x, _, _ = tensors()
    n = torch.tensor(3)
    s_out, n_out = tf(r, s, a, x, n, torch.tensor(False))
    assert n_out.dtype == torch.int64 and int(n_out) == 3 and not n_out.requires_grad
    s_out.backward()
    torch.testing.assert_close(x.grad, a.detach())
    assert int(n) == 3


def test_in_a_module_training_loop(make, path):
    f = make("""
        def model(y, w, x):
            for i in range(len(y)):
                y[i] += w[0] * tanh(w[1] * x[i]) + w[2]
    """)
    layer = to_torch(f, outputs="y")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor([0.5, 0.5, 0.0], dtype=D))

        def forward(self, x):
            return layer(torch.zeros_like(x), self.w, x)

    torch.manual_seed(0)
    x = torch.linspace(-2, 2, 20, dtype=D)
    target = 2.0 * torch.tanh(1.5 * x) - 0.3
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = ((net(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0]


def test_torch_compile_aot_eager(make):
    # the operators are opaque to Dynamo: the whole graph is captured (fullgraph), and
    # the backward pass runs the pullback operator
    f = make(RESID)
    tf = to_torch(f, outputs="r")

    def loss(a, x):
        return (tf(torch.zeros(3, dtype=D), torch.tensor(0.5, dtype=D), a, x, 2, True) ** 2).sum()

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    a, x = tensors()[2:4]
    compiled(a, x).backward()
    a2, x2 = tensors()[2:4]
    loss(a2, x2).backward()
    torch.testing.assert_close(a.grad, a2.grad)
    torch.testing.assert_close(x.grad, x2.grad)


@pytest.mark.slow
def test_torch_compile_inductor_module(make):
    f = make(RESID)
    tf = to_torch(f, outputs="r")

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.ones(3, dtype=D))

        def forward(self, x):
            return tf(torch.zeros(3, dtype=D), 0.0, self.a, x, 0, False).sum()

    m = M()
    out = torch.compile(m, fullgraph=True)(torch.tensor([1.0, 2.0, 3.0], dtype=D))
    out.backward()
    assert float(out.detach()) == pytest.approx(14.0)
    torch.testing.assert_close(m.a.grad, torch.tensor([1.0, 4.0, 9.0], dtype=D))


def test_errors(make):
    f = make(RESID)
    tf = to_torch(f, outputs="r")
    r, s, a, x, n, flag = tensors()
    with pytest.raises(TypeError, match=r"`x` has dtype torch.float32.*float64"):
        tf(r, s, a, x.float(), n, flag)
    with pytest.raises(TypeError, match=r"`n` has dtype torch.int32"):
        tf(r, s, a, x, torch.tensor(2, dtype=torch.int32), flag)
    with pytest.raises(TypeError, match=r"takes 6 argument\(s\)"):
        tf(r, s, a, x, n)
    with pytest.raises(TypeError, match="`x` must be a tensor or a number"):
        tf(r, s, a, [1.0, 2.0, 3.0], n, flag)
    with pytest.raises(ValueError, match="'q' is not an argument"):
        to_torch(f, outputs="q")
    bad = make(DIRTY)
    with pytest.raises(ReversibilityError, match="ancilla `t` is not back"):
        to_torch(bad, outputs="y")(0.0, 2.0)
    with pytest.raises(IndexError, match="out of bounds"):  # revbench's error, in its function
        tf(r, s, a[:2].detach(), x.detach(), n, flag)


def test_one_export_for_several_sizes(make, path):
    f = make("""
        def wsum(y, x, w):
            for i in range(len(x)):
                y += w[i] * x[i] * x[i]
    """)
    tf = to_torch(f, outputs="y")
    for n in (3, 5, 2):
        x = torch.linspace(0.5, 1.5, n, dtype=D, requires_grad=True)
        w = torch.arange(1.0, n + 1, dtype=D, requires_grad=True)
        tf(0.0, x, w).backward()
        torch.testing.assert_close(x.grad, 2 * w.detach() * x.detach())
        torch.testing.assert_close(w.grad, x.detach() ** 2)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # (torch.func's)
def test_what_the_export_cannot_differentiate_is_refused_not_zero(make, path):
    """Second derivatives (``create_graph=True``: ``functional.hessian``, ``gradgradcheck``),
    forward mode (``forward_ad``) and ``torch.func``'s derivative transforms are refused with
    one clear error: PyTorch took them as zero (a hessian of zeros, a ``None`` tangent) or
    failed inside.  A first derivative, ``vmap`` alone and ``gradcheck`` still work."""
    import torch.autograd.forward_ad as fw
    from torch.func import grad, jacfwd, vmap

    cube = make("def cube(s, x):\n    for i in range(len(x)):\n        s += x[i] * x[i] * x[i]\n")
    f = to_torch(cube, outputs="s")
    x = torch.tensor([1.0, 2.0], dtype=D, requires_grad=True)
    refusals = [
        lambda: torch.autograd.functional.hessian(lambda x: f(0.0, x), x),
        lambda: torch.autograd.grad(f(0.0, x), x, create_graph=True),
        lambda: grad(lambda x: f(0.0, x))(x.detach()),
        lambda: jacfwd(lambda x: f(0.0, x))(x.detach()),
    ]
    for call in refusals:
        with pytest.raises(RuntimeError, match=r"to_torch\(cube\): "):
            call()
    with fw.dual_level():
        xd = fw.make_dual(x.detach(), torch.tensor([1.0, 0.0], dtype=D))
        with pytest.raises(RuntimeError, match="not forward mode or second derivatives"):
            f(0.0, xd)
    assert torch.autograd.grad(f(0.0, x), x)[0].tolist() == [3.0, 12.0]
    assert torch.autograd.gradcheck(lambda x: f(0.0, x), (x,))
    assert vmap(lambda x: f(0.0, x))(torch.ones(3, 2, dtype=D)).tolist() == [2.0] * 3
    with pytest.raises(TypeError, match="`x` is a meta tensor"):
        f(0.0, torch.ones(2, dtype=D, device="meta"))
