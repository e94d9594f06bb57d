"""Objects from a checked config (sopt.problems.neural_field_image.config): model, loss, optimiser, schedule."""

from __future__ import annotations

from typing import Any

from sopt import losses, nn, optim
from sopt.optim import lr_scheduler
from sopt.validation import check_float, check_int


def _fused_activation(name: Any) -> str:
    """A config activation name ("ReLU", "None", "LeakyReLU", ...) as FullyFusedMLP spells it."""
    names = {k.replace("_", ""): k for k in nn.fully_fused_mlp.ACTIVATIONS}
    key = str(name).lower().replace("_", "")
    if key not in names:
        raise ValueError(f"FullyFusedMLP activation must be one of {sorted(nn.fully_fused_mlp.ACTIVATIONS)}, got {name!r}")
    return names[key]


def build_model(config: dict[str, Any]) -> nn.Module:
    """encoding + network sections -> a model from (x, y) to RGB.

    "MLP": sopt.nn.MLP (a Sequential of fused Linear layers, the encoding as module 0; none for "Identity").
    "FullyFusedMLP": sopt.nn.FullyFusedMLP (one kernel per pass; a Frequency encoding is fused into it, a
    HashGrid encoding runs before it in a Sequential). ``deterministic`` goes to every layer with a reduction.
    """
    det = bool(config.get("deterministic", False))
    net = config["network"]
    encoding = None if config["encoding"]["otype"] == "Identity" else config["encoding"]
    if net["otype"] == "FullyFusedMLP":
        fused = dict(hidden_features=net.get("n_neurons", 64), hidden_layers=net.get("n_hidden_layers", 2),
                     activation=_fused_activation(net.get("activation", "ReLU")),
                     output_activation=_fused_activation(net.get("output_activation", "None")), seed=config["seed"],
                     deterministic=det)
        if encoding is None or encoding["otype"] == "Frequency":
            return nn.FullyFusedMLP(2, 3, encoding=encoding, **fused)
        grid = nn.make_encoding(encoding, 2, seed=config["seed"], deterministic=det)
        return nn.Sequential(grid, nn.FullyFusedMLP(grid.out_features, 3, **fused))
    return nn.MLP(2, 3, hidden_features=net.get("n_neurons", 64), hidden_layers=net.get("n_hidden_layers", 2),
                  activation=net.get("activation", "ReLU"), output_activation=net.get("output_activation", "None"),
                  encoding=encoding, seed=config["seed"], deterministic=det)


def build_loss(config: dict[str, Any]) -> losses.Loss:
    """loss section -> L2: MSELoss, L1: L1Loss, Huber: HuberLoss(delta), RelativeL2: RelativeL2Loss(epsilon)."""
    spec = config["loss"]
    if spec["otype"] == "L2":
        return losses.MSELoss()
    if spec["otype"] == "L1":
        return losses.L1Loss()
    if spec["otype"] == "Huber":
        return losses.HuberLoss(delta=spec.get("delta", 1.0))
    return losses.RelativeL2Loss(eps=spec.get("epsilon", 1e-2))


def build_optimizer(config: dict[str, Any], parameters: Any) -> optim.Optimizer:
    """tiny-cuda-nn-style optimizer section -> a sopt optimiser over ``parameters``."""
    o = config["optimizer"]
    clip = {"max_grad_norm": o.get("max_grad_norm")}
    if o["otype"] in ("Adam", "AdamW"):
        cls = optim.Adam if o["otype"] == "Adam" else optim.AdamW
        default_decay = 0.0 if o["otype"] == "Adam" else 1e-2
        return cls(parameters, lr=o.get("learning_rate", 1e-3), betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                   eps=o.get("epsilon", 1e-8), weight_decay=o.get("weight_decay", default_decay), **clip)
    return optim.SGD(parameters, lr=o.get("learning_rate", 1e-3), momentum=o.get("momentum", 0.0),
                     nesterov=o.get("nesterov", False), weight_decay=o.get("weight_decay", 0.0), **clip)


def build_scheduler(config: dict[str, Any], optimizer: optim.Optimizer) -> lr_scheduler.LRScheduler | None:
    """The schedule section -> a scheduler stepped once per training step (None for "Constant")."""
    s, steps = config["schedule"], config["steps"]
    if s["otype"] == "WarmupCosine":
        lr = optimizer.param_groups[0]["lr"]
        warmup = min(check_int(s.get("warmup_steps", 0), "schedule warmup_steps", low=0), steps - 1)
        return lr_scheduler.WarmupCosineLR(optimizer, warmup_steps=warmup, total_steps=steps,
                                           eta_min=lr * check_float(s.get("final_lr_factor", 0.0), "schedule final_lr_factor", low=0.0))
    if s["otype"] == "Step":
        return lr_scheduler.StepLR(optimizer, step_size=s.get("step_size", max(1, steps // 3)), gamma=s.get("gamma", 0.1))
    if s["otype"] == "Exponential":
        return lr_scheduler.ExponentialLR(optimizer, gamma=s.get("gamma", 0.999))
    return None
