"""Toy model and loss for the Trainer tests, independent of sopt.nn and sopt.losses (tests/train/toy.slang).

PixelTable: one RGB Parameter per pixel, looked up at the pixel-centre coordinate of each sample. Every
pixel's gradient only depends on its own samples, so training converges to the image exactly when the step
is right. HostMSE: the loss contract (writes dLoss/dpred into pred.grad with one kernel, returns a value
with item()), the value itself computed on the host when read."""

from __future__ import annotations

import pathlib

import numpy as np
import slangpy as spy

import sopt
from sopt.runtime import device as dev
from sopt.nn.module import Module

_SOURCE = pathlib.Path(__file__).with_name("toy.slang")


def _module() -> spy.Module:
    return spy.Module.load_from_file(sopt.get_device(), str(_SOURCE))


class PixelTable(Module):
    in_features = 2
    out_features = 3

    def __init__(self, height: int, width: int, init: float = 0.5) -> None:
        self.height, self.width = height, width
        self.table = sopt.Parameter(np.full((height * width, 3), init, np.float32), name="table")
        self._module = _module()
        self._outputs: dict[int, spy.Tensor] = {}

    def named_parameters(self):
        yield "table", self.table

    def forward(self, x: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        n = x.shape[0]
        y = self._outputs.get(n)
        if y is None:
            y = self._outputs[n] = spy.Tensor.empty(sopt.get_device(), (n, 3), "float").with_grads(zero=True)
        if encoder is None:
            self._module.pixel_lookup(x, self.table.tensor, self.width, self.height, _result=y)
        else:
            self._module.pixel_lookup.append_to(encoder, x, self.table.tensor, self.width, self.height, _result=y)
        dev.count_dispatch()
        return y

    def backward(self, x: spy.Tensor, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        if encoder is None:
            self._module.pixel_lookup.bwds(x, self.table.tensor, self.width, self.height, _result=y)
        else:
            self._module.pixel_lookup.bwds.append_to(encoder, x, self.table.tensor, self.width, self.height,
                                                     _result=y)
        dev.count_dispatch()


class HostLossValue:
    """The batch MSE (float32), read from the GPU only when ``item()`` is called (counted in ``reads``)."""

    reads = 0

    def __init__(self, pred: spy.Tensor, target: spy.Tensor) -> None:
        self.pred, self.target = pred, target

    def item(self) -> float:
        HostLossValue.reads += 1
        # float32 like a GPU reduction, so a diverged prediction overflows to Inf as it would there
        with np.errstate(over="ignore", invalid="ignore"):
            return float(np.mean((self.pred.to_numpy() - self.target.to_numpy()) ** 2, dtype=np.float32))


class HostMSE:
    """loss_fn(pred, target, encoder) -> HostLossValue; records dLoss/dpred into pred.grad (one dispatch)."""

    def __init__(self) -> None:
        self._module = _module()

    def __call__(self, pred: spy.Tensor, target: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> HostLossValue:
        scale = 2.0 / (pred.shape[0] * pred.shape[1])
        if encoder is None:
            self._module.mse_grad(pred, target, scale, _result=pred.grad)
        else:
            self._module.mse_grad.append_to(encoder, pred, target, scale, _result=pred.grad)
        dev.count_dispatch()
        return HostLossValue(pred, target)
