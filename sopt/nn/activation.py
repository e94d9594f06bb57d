"""Element-wise activations with torch's semantics (kernels: slang_lib/nn/activation.slang).

Each works on a batch of any feature count F (``in_features`` / ``out_features`` are None), one GPU thread
per element. Fused after a Linear (``Linear(..., activation="relu")``, or the MLP builder) they cost no
extra pass. Derivatives at the kinks follow torch: ReLU'(0) = 0, LeakyReLU'(0) = slope.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterator, Literal

import slangpy as spy

from sopt.nn.batch import BatchBuffers, as_batch, batch_grad, batch_in, check_output, has_grad
from sopt.runtime.kernel import Function, launch
from sopt.nn.module import Module
from sopt.autodiff.parameter import Parameter
from sopt.utils.validation import check_float


class Activation(Module):
    """Base of the element-wise activations: y = f(x) element by element, shape preserved.

    Subclasses name their Slang struct (``slang_name``, in slang_lib/nn/activation_functions.slang, the one
    definition the layer kernels and FullyFusedMLP's fused kernels share), give its two float parameters
    (``slang_params``) and their canonical lower-case name (``key``: "relu", "leaky_relu", ...).
    """

    slang_name: ClassVar[str]
    key: ClassVar[str]
    in_features = None   # any: shape-preserving
    out_features = None

    def __init__(self) -> None:
        self._buffers = BatchBuffers()
        self._forward_fn = Function("nn/activation", "activation_forward", self.slang_name)
        self._backprop_fn = Function("nn/activation", "activation_backprop", self.slang_name).backward

    @property
    def slang_params(self) -> tuple[float, float]:
        """The ``p`` of ``IActivation.apply(z, p)`` (activation.slang)."""
        return (0.0, 0.0)

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        return iter(())

    def forward(self, x: Any, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        """``y = f(x)`` for ``x`` of shape (N, F) float32; ``y`` (N, F) with a gradient buffer, reused per N."""
        x = as_batch(x, None, type(self).__name__)
        n, f = x.shape
        y = self._buffers.get("y", n, f, grads=True)
        launch(self._forward_fn, encoder,
               t=spy.grid((n, f)), x=batch_in(x, False), p=spy.float2(*self.slang_params), y=y)
        return y

    def backward(self, x: Any, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        """``x.grad = f'(x) * y.grad`` when ``x`` carries a gradient buffer (nothing to do otherwise)."""
        x = as_batch(x, None, type(self).__name__)
        n, f = x.shape
        check_output(y, n, f, type(self).__name__)
        if not has_grad(x):
            return
        launch(self._backprop_fn, encoder,
               t=spy.grid((n, f)), x=batch_in(x, True), p=spy.float2(*self.slang_params), y=batch_grad(y))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ReLU(Activation):
    """max(x, 0)."""

    slang_name = "ReLU"
    key = "relu"


class LeakyReLU(Activation):
    """x for x > 0, else ``slope * x`` (torch's ``negative_slope``)."""

    slang_name = "LeakyReLU"
    key = "leaky_relu"

    def __init__(self, slope: float = 0.01) -> None:
        super().__init__()
        self.slope = check_float(slope, "LeakyReLU slope")

    @property
    def slang_params(self) -> tuple[float, float]:
        return (self.slope, 0.0)

    def __repr__(self) -> str:
        return f"LeakyReLU(slope={self.slope})"


class Sigmoid(Activation):
    """1 / (1 + exp(-x)), evaluated without overflow."""

    slang_name = "Sigmoid"
    key = "sigmoid"


class Tanh(Activation):
    """tanh(x)."""

    slang_name = "Tanh"
    key = "tanh"


class SiLU(Activation):
    """x * sigmoid(x) (swish)."""

    slang_name = "SiLU"
    key = "silu"


class Softplus(Activation):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (torch.nn.Softplus). beta > 0."""

    slang_name = "Softplus"
    key = "softplus"

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = check_float(beta, "Softplus beta", low=0.0, low_inclusive=False)
        self.threshold = check_float(threshold, "Softplus threshold")

    @property
    def slang_params(self) -> tuple[float, float]:
        return (self.beta, self.threshold)

    def __repr__(self) -> str:
        return f"Softplus(beta={self.beta}, threshold={self.threshold})"


class Sine(Activation):
    """sin(w0 * x), SIREN's activation (Sitzmann et al. 2020); pair it with SIREN initialisation (see MLP)."""

    slang_name = "Sine"
    key = "sine"

    def __init__(self, w0: float = 30.0) -> None:
        super().__init__()
        self.w0 = check_float(w0, "Sine w0", low=0.0, low_inclusive=False)

    @property
    def slang_params(self) -> tuple[float, float]:
        return (self.w0, 0.0)

    def __repr__(self) -> str:
        return f"Sine(w0={self.w0})"


ACTIVATIONS: dict[str, type[Activation]] = {
    "relu": ReLU, "leakyrelu": LeakyReLU, "sigmoid": Sigmoid, "tanh": Tanh, "silu": SiLU, "swish": SiLU,
    "softplus": Softplus, "sine": Sine, "sin": Sine,
}
_NONE = ("none", "identity", "linear")
NONE_KEY = "none"   # activation_key of no activation


def activation_class(name: str, who: str = "activation") -> type[Activation] | None:
    """The Activation class ``name`` stands for, or None for no activation: the one name normaliser of sopt.nn.

    Case and underscores are ignored (``"LeakyReLU"``, ``"leaky_relu"`` and ``"leakyrelu"`` are the same);
    ``"None"``/``"identity"``/``"linear"`` mean no activation. ValueError naming ``who`` and listing the
    allowed names for anything else.
    """
    key = name.lower().replace("_", "")
    if key in _NONE:
        return None
    cls = ACTIVATIONS.get(key)
    if cls is None:
        allowed = ", ".join(repr(n) for n in sorted({*(c.key for c in ACTIVATIONS.values()), *_NONE, "swish", "sin"}))
        raise ValueError(f"unknown activation {name!r}: {who} must be one of {allowed} (case and underscores "
                         "ignored)")
    return cls


def activation_key(activation: Activation | None) -> str:
    """The canonical lower-case name of ``activation`` ("relu", "leaky_relu", ...; "none" for None)."""
    return NONE_KEY if activation is None else type(activation).key


def slang_activation(activation: Activation | None) -> tuple[str, tuple[float, float]]:
    """(Slang struct, its ``p``) of ``activation`` for a kernel that fuses it: ``("Identity", (0, 0))`` for None."""
    if activation is None:
        return "Identity", (0.0, 0.0)
    return activation.slang_name, activation.slang_params


def make_activation(spec: Any, who: str = "activation") -> Activation | None:
    """An Activation from a config value, or None for no activation.

    ``spec``: None; a name, case and underscores ignored (``"relu"``, ``"ReLU"``, ``"leaky_relu"``, ``"SiLU"``,
    ``"Softplus"``, ``"Sine"``, ... ; ``"None"``/``"identity"``/``"linear"`` for none; see activation_class);
    a dict with ``"otype"`` (tiny-cuda-nn style) and the constructor's keyword arguments
    (``{"otype": "LeakyReLU", "slope": 0.1}``); or an Activation instance.
    """
    if spec is None or isinstance(spec, Activation):
        return spec
    options: dict[str, Any] = {}
    if isinstance(spec, dict):
        if "otype" not in spec:
            raise ValueError(f"{who}: an activation dict needs an 'otype' entry, got {spec!r}")
        options = {k: v for k, v in spec.items() if k != "otype"}
        spec = spec["otype"]
    if not isinstance(spec, str):
        raise ValueError(f"{who}: expected None, a name, a dict with 'otype' or an Activation, got {type(spec).__name__}")
    cls = activation_class(spec, who)
    if cls is None:
        if options:
            raise ValueError(f"{who}: activation {spec!r} takes no options, got {sorted(options)}")
        return None
    try:
        return cls(**options)
    except TypeError:
        raise ValueError(f"{who}: {cls.__name__} got unknown option(s) {sorted(options)}") from None


# The activation names of a network config (tiny-cuda-nn's spelling; "None": no activation).
ActivationName = Literal["None", "ReLU", "LeakyReLU", "Sigmoid", "Tanh", "SiLU", "Softplus", "Sine"]


def activation_name(activation: Activation | None, who: str) -> str:
    """The config name (:data:`ActivationName`) of ``activation``; ValueError for one whose options differ from
    its defaults (a config names the activation only)."""
    if activation is None:
        return "None"
    default = type(activation)()
    if activation.slang_params != default.slang_params:
        raise ValueError(f"{who}: {activation!r} has options a config cannot hold (a config names the activation "
                         f"only: {default!r})")
    return type(activation).__name__
