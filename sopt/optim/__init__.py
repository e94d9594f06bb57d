"""Optimisers with torch.optim's names, defaults and update rules, each a Slang kernel over one flat arena."""

from sopt.optim import lr_scheduler
from sopt.optim.adagrad import Adagrad
from sopt.optim.adam import Adam
from sopt.optim.adamw import AdamW
from sopt.optim.optimizer import Optimizer
from sopt.optim.rmsprop import RMSprop
from sopt.optim.sgd import SGD

__all__ = ["lr_scheduler", "Adagrad", "Adam", "AdamW", "Optimizer", "RMSprop", "SGD"]
