"""sopt: gradient-based optimisation on the GPU with Slang kernels through SlangPy."""

from sopt import init, losses, nn, optim, sim, train
from sopt.checkpoint import CheckpointError, load, save
from sopt.device import device_kind, get_device, synchronize
from sopt.nn.gradcheck import gradcheck
from sopt.parameter import Parameter
from sopt.slang_module import load_module
from sopt.tape import Tape, TapeError

__version__ = "0.1.0"

__all__ = ["CheckpointError", "Parameter", "Tape", "TapeError", "device_kind", "get_device", "gradcheck", "init", "load", "load_module", "losses", "nn",
           "optim", "save", "sim", "synchronize", "train"]
