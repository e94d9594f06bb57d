"""TorchModule in torch training: a torch optimiser's update is what the sopt module computes with next; schedulers,
GradScaler, state_dict / torch.save; sopt optimisers over torch parameters match torch.optim."""

from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="sopt.torch needs torch (pip install 'sopt[torch]')")

import sopt
from sopt.nn import FullyFusedMLP, Linear, vjp
from sopt.torch import TorchModule

pytestmark = pytest.mark.filterwarnings("ignore:sopt.torch. sopt runs on Vulkan:RuntimeWarning")


def _batch(device: torch.device, n: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, generator=g).to(device)
    return x, torch.sin(3 * x[:, :1]) * torch.cos(2 * x[:, 1:])


def test_torch_optimizer_updates_reach_sopt_module(tdev: torch.device) -> None:
    module = FullyFusedMLP(2, 1, 8, 2, activation="tanh", seed=1)
    net = TorchModule(module)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    scaler = torch.amp.GradScaler(tdev.type, init_scale=1024.0)
    x, target = _batch(tdev)
    losses = []
    for _ in range(4):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), target)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert opt.param_groups[0]["lr"] == pytest.approx(2.5e-3)
    # the sopt module computes with the torch parameters' values: its own forward equals a float64 evaluation
    sd = {k: p.detach().cpu().double() for k, p in net.named_parameters()}
    net(x)   # synchronises (copy mode uploads the changed values)
    for key, value in module.state_dict().items():
        np.testing.assert_array_equal(value, sd[key].float().numpy())
    h = x.cpu().double()
    for i in range(3):
        h = h @ sd[f"{i}.weight"].T + sd[f"{i}.bias"]
        h = torch.tanh(h) if i < 2 else h
    y_sopt, _, _ = vjp(module, x.cpu().numpy(), np.zeros((16, 1), np.float32))
    np.testing.assert_allclose(y_sopt, h.numpy(), rtol=1e-4, atol=1e-5)


def test_state_dict_and_torch_save_round_trip(tdev: torch.device) -> None:
    a, b = TorchModule(Linear(3, 2, seed=1)), TorchModule(Linear(3, 2, seed=2))
    x = torch.rand(4, 3, device=tdev)
    assert not torch.equal(a(x), b(x))
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b.load_state_dict(torch.load(buffer))
    torch.testing.assert_close(b(x), a(x), rtol=0, atol=0)
    np.testing.assert_array_equal(b.sopt_module.weight.numpy(), a.sopt_module.weight.numpy())


def test_module_called_twice_sums_gradients(tdev: torch.device) -> None:
    net = TorchModule(Linear(2, 2, activation="tanh", seed=3))
    x1, x2 = torch.rand(5, 2, device=tdev), torch.rand(6, 2, device=tdev)
    (net(x1).sum() + 2 * net(x2).sum()).backward()
    twice = net.weight.grad.clone()
    net.zero_grad()
    net(x1).sum().backward()
    (2 * net(x2).sum()).backward()
    torch.testing.assert_close(twice, net.weight.grad, rtol=1e-6, atol=1e-7)


class _TorchNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_sopt_adam_over_torch_model_matches_torch_adam(tdev: torch.device) -> None:
    ours, theirs = _TorchNet().to(tdev), _TorchNet().to(tdev)
    opt = sopt.optim.Adam(ours.parameters(), lr=0.05, weight_decay=0.01)
    ref = torch.optim.Adam(theirs.parameters(), lr=0.05, weight_decay=0.01)
    x, target = _batch(tdev, seed=1)
    for _ in range(4):
        for model, o in ((ours, opt), (theirs, ref)):
            o.zero_grad()
            torch.nn.functional.mse_loss(model(x), target).backward()
            o.step()
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
        assert p.grad is None or not p.grad.any()   # zero-on-step
    assert ours(x).shape == (16, 1)   # the torch model keeps working


def test_sopt_adam_over_torch_module_parameters(tdev: torch.device) -> None:
    module = FullyFusedMLP(2, 1, 8, 1, activation="tanh", seed=2)
    net = TorchModule(module)
    twin = TorchModule(FullyFusedMLP(2, 1, 8, 1, activation="tanh", seed=2))
    opt = sopt.optim.Adam(net.parameters(), lr=0.02)
    ref = torch.optim.Adam(twin.parameters(), lr=0.02)
    # the sopt Parameters of the same names (windows of the flat one), which the arena holds once
    assert [p.key for p in opt.param_groups[0]["params"]] == [k for k, _ in module.named_parameters()]
    assert opt.arena.params == module.parameters() and opt.arena.storage_params == [module.params]
    x, target = _batch(tdev, seed=2)
    for i in range(3):
        for model, o in ((net, opt), (twin, ref)):
            if o is ref or i != 1:   # sopt's step zeroes the gradients itself (zero_grad is optional)
                o.zero_grad()
            torch.nn.functional.mse_loss(model(x), target).backward()
            o.step()
    for (name, p), q in zip(net.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    np.testing.assert_allclose(module.state_dict()["0.weight"], net.get_parameter("0.weight").detach().cpu().numpy())


def test_partial_windows_refused() -> None:
    net = TorchModule(FullyFusedMLP(2, 1, 8, 1, seed=2))
    first = [p for k, p in net.named_parameters() if k.startswith("0.")]
    with pytest.raises(ValueError, match=r"not \['1.weight', '1.bias'\]"):
        sopt.optim.Adam(first, lr=0.1)
    assert net.sopt_module.params.owner is None   # nothing changed


def test_step_into_a_callers_encoder(shared: bool, tdev: torch.device) -> None:
    model = _TorchNet().to(tdev)
    opt = sopt.optim.SGD(model.parameters(), lr=0.1)
    encoder = sopt.runtime.device.get_device().create_command_encoder()
    if not shared:   # copy mode downloads the new values after its own submission
        with pytest.raises(ValueError, match="call step\\(\\) without an encoder"):
            opt.step(encoder)
        return
    # shared: the step is recorded into the caller's encoder and lands with its submission
    x, target = _batch(tdev)
    torch.nn.functional.mse_loss(model(x), target).backward()
    expected = [(p - 0.1 * p.grad).detach().clone() for p in model.parameters()]
    opt.step(encoder)
    sopt.runtime.device.submit(encoder)
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.detach(), e, rtol=1e-6, atol=1e-7)


def test_gradient_paths_agree(tdev: torch.device, shared: bool) -> None:
    """However torch asks for them (backward into None or into existing .grad, zero_grad to zero, autograd.grad,
    a hook, two wrappers of one sopt module), the gradients are the same numbers; on CUDA the plain backward
    writes them in place (.grad views sopt's gradient memory)."""
    module = FullyFusedMLP(2, 1, 8, 1, activation="tanh", seed=4)
    net = TorchModule(module)
    x, target = _batch(tdev, seed=3)

    def loss(model: TorchModule = net) -> torch.Tensor:
        return torch.nn.functional.mse_loss(model(x), target)

    loss().backward()
    ref = {k: p.grad.clone() for k, p in net.named_parameters()}
    if shared:   # in place: the window of the sopt Parameter's gradient
        first = net.get_parameter("0.weight")
        assert first.grad.data_ptr() == sopt.torch.arrays.torch_view(module.params.grad).data_ptr()
    loss().backward()   # accumulates into the .grad there
    for k, p in net.named_parameters():
        torch.testing.assert_close(p.grad, 2 * ref[k], rtol=1e-5, atol=1e-7, msg=k)
    net.zero_grad(set_to_none=False)
    loss().backward()
    for k, p in net.named_parameters():
        torch.testing.assert_close(p.grad, ref[k], rtol=1e-5, atol=1e-7, msg=k)
    kept = {k: p.grad.clone() for k, p in net.named_parameters()}
    grads = torch.autograd.grad(loss(), list(net.parameters()))   # returned; .grad untouched
    for (k, p), g in zip(net.named_parameters(), grads):
        torch.testing.assert_close(g, ref[k], rtol=1e-5, atol=1e-7, msg=k)
        torch.testing.assert_close(p.grad, kept[k], rtol=0, atol=0, msg=k)
    net.zero_grad()
    handle = net.get_parameter("1.bias").register_hook(lambda g: 3 * g)
    loss().backward()
    handle.remove()
    for k, p in net.named_parameters():
        torch.testing.assert_close(p.grad, (3 if k == "1.bias" else 1) * ref[k], rtol=1e-5, atol=1e-7, msg=k)
    net.zero_grad()
    loss().backward()   # (on CUDA: .grad views the sopt gradient again)
    twin = TorchModule(module)   # a second wrapper of the same sopt module: its backward clears p.grad first
    twin_grads = dict(zip(ref, torch.autograd.grad(loss(twin), list(twin.parameters()))))
    loss(twin).backward()
    for k, p in net.named_parameters():
        torch.testing.assert_close(p.grad, ref[k], rtol=1e-5, atol=1e-7, msg=k)
        torch.testing.assert_close(twin.get_parameter(k).grad, ref[k], rtol=1e-5, atol=1e-7, msg=k)
        torch.testing.assert_close(twin_grads[k], ref[k], rtol=1e-5, atol=1e-7, msg=k)
