"""Optimizer: the base of every sopt optimiser (torch.optim's interface, Slang kernels underneath).

A step is a fixed number of dispatches over the whole flat arena, whatever the number of parameters. At its
heart is the optimiser's update kernel: it reads each gradient, writes zero in its place (zero-on-step) and,
unless the step is skipped, applies the update rule to values and state. A step is *non-finite* when a
gradient holds a NaN/Inf, or when the values or state the update computes do (an update that overflows
float32, e.g. SGD with ``lr=1e30`` on a gradient of 1e10, or an lr set to 1e40 in ``param_groups`` after
construction: the constructor and ``load_state_dict`` refuse hyperparameters that float32 stores as Inf, 0 or a
subnormal, but not every overflow they cause). Around the update, by options:

* ``skip_nonfinite=False``, no ``max_grad_norm``: the update alone, in place, checking nothing. One dispatch.
* ``skip_nonfinite`` (the default), ``double_buffer=True`` (the default): the update reads values and state
  from one side of a double-buffered arena and writes them to the other, raising a flag when a gradient it
  reads, or a value or state it writes, holds a NaN/Inf (one more ``isfinite`` per float4 written, in
  registers); then the side read is copied over the side written when the flag is up (and otherwise nothing
  happens), counting the step in ``skipped_steps``: by the update's last thread group to finish on an arena of
  at most UNDO_MAX_VECTORS float4 vectors (one dispatch), else by ``nonfinite_restore`` (two; the last group's
  wait costs more GPU time on a large arena than a dispatch costs host time). The check thus costs no extra
  pass over the gradients, for a second copy of values and state in memory; the Parameters' views follow the
  current side.
* ``max_grad_norm``: ``grad_stats`` first, the global gradient norm ``||g||_2`` and the count of float4
  gradient vectors holding a NaN/Inf, reduced on the GPU into the clip coefficient
  ``min(1, max_grad_norm / (||g||_2 + 1e-6))`` (torch.nn.utils.clip_grad_norm_). The sum of squares is kept
  scaled by a power of two (LAPACK's nrm2), so finite gradients whose norm, or its square, exceeds float32
  are clipped exactly, not mistaken for NaN/Inf; below 2^40 per element it is the plain sum, bit for bit.
  With ``skip_nonfinite`` and ``double_buffer`` the update is then the double-buffered checked one above
  (two dispatches, three on a large arena); otherwise it runs in place (two), and ``grad_stats`` skips a step
  whose gradients hold a NaN/Inf even with ``skip_nonfinite=False`` (their norm would be NaN).
* ``skip_nonfinite`` with ``double_buffer=False``: ``nonfinite_scan`` first, a read-only pass over the
  gradients that raises the flag, then the update in place, skipped when the flag is up. Two dispatches.

An in-place update (``double_buffer=False``, or ``max_grad_norm`` with ``skip_nonfinite=False``) cannot undo a
step whose *result* is non-finite once it has written it: it counts such a step in ``nonfinite_results`` (not
in ``skipped_steps``: it was applied) and warns that parameters now hold non-finite values, which the
Trainer's next loss reports.

The host never waits for the GPU inside ``step()``; it reads the counts every ``poll_every`` steps (and in
``state_dict`` / ``skipped_steps`` / ``nonfinite_results``) to warn once when steps were skipped or spoiled.

Differences from torch.optim: every parameter of the optimiser always has a gradient (zero when nothing
wrote one), so all parameters are stepped together like torch with ``zero_grad(set_to_none=False)``, and
``step`` counts are per optimiser rather than per parameter.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, ClassVar, Iterable

import numpy as np
import slangpy as spy

from sopt.runtime import device as dev
from sopt.runtime.kernel import Kernel
from sopt.optim.arena import ParameterArena
from sopt.optim.hyperparameter import Hyperparameter, signature
from sopt.optim.param_groups import SCHEDULE_GROUP_KEYS, normalise_groups
from sopt.optim.state_dict import StateDict
from sopt.utils.validation import check_bool, check_float, check_float32, check_int

__all__ = ["Optimizer", "SCHEDULE_GROUP_KEYS"]


def _frozen(value: Any) -> Any:
    """A group's hyperparameter value as an immutable one (a list a user assigned, then changed in place, must not
    compare equal to itself as it was)."""
    return tuple(value) if isinstance(value, (list, np.ndarray)) else value


def _torch_link(params: list[Any]) -> Any:
    """sopt.torch's link keeping torch parameters among ``params`` in step with the arena, or None (none there;
    never imports sopt.torch, which only adopted Parameters can come from)."""
    module = sys.modules.get("sopt.torch.optimizer_link")
    return module.link_for(params) if module is not None else None

THREADS = 256          # threads per group of every optimiser kernel (slang_lib/optim/optimizer.slang)
# a pending gradient source's kind (sopt.autodiff.grad_source) -> the suffix of the update kernels that fold it
FOLD_ENTRIES = {"half_sums": "_fold", "fixed_sums": "_fold_fixed"}
MAX_GROUPS = 16        # parameter groups one dispatch handles
STATS_GROUPS = 1024    # most thread groups of the statistics pass
SCAN_PER_THREAD = 4    # float4 gradient vectors per thread of the non-finite scan
# control-buffer word offsets (see optimizer.slang)
_CTL_SKIPPED = 3
_CTL_RESULTS = 10      # steps whose in-place update wrote a NaN/Inf
_CTL_ATTEMPTS = 11     # step() calls so far: word 11 + p before a step of parity p (the update writes the other)
_CTL_LAYOUT = 16
_CTL_GROUP_ENDS = 24   # one word per parameter group: its end vector
_CTL_WORDS = _CTL_GROUP_ENDS + MAX_GROUPS + 3 * STATS_GROUPS
# how a step checks its gradients (optimizer.slang's PASS_*)
_PASS_NONE, _PASS_STATS, _PASS_SCAN, _PASS_CHECK, _PASS_STATS_CHECK = 0, 1, 2, 3, 4
_PASS_UNDO = 8   # bit: the double-buffered update's last group undoes a non-finite step (no nonfinite_restore)
# most float4 vectors of an arena whose update undoes itself: each of its groups then waits for its writes before
# counting itself done, and past this size that wait costs more GPU time than nonfinite_restore's own dispatch
UNDO_MAX_VECTORS = 1 << 20
RESTORE_GROUPS = 1024  # most thread groups of nonfinite_restore
_DOUBLE_BUFFERED = (_PASS_CHECK, _PASS_STATS_CHECK)   # passes whose update writes the other side
# the kernels every optimiser shares (slang_lib/optim/optimizer.slang), by role
_SHARED_KERNELS = {"stats": Kernel("optim/optimizer", "grad_stats"), "scan": Kernel("optim/optimizer", "nonfinite_scan"),
                   "restore": Kernel("optim/optimizer", "nonfinite_restore"), "fill": Kernel("optim/optimizer", "fill")}


class Optimizer(StateDict):
    """Base class. Subclasses declare their :class:`Hyperparameter` s and name their kernel and state slots.

    The constructor of a subclass is ``(params, <its hyperparameters in declared order, torch's defaults>, *,
    max_grad_norm=None, skip_nonfinite=True, double_buffer=True, poll_every=64)`` (see ``inspect.signature``); the
    hyperparameters given are the defaults of groups that don't set them. Its update kernel's entry points take
    ``uniform StructuredBuffer<Hyper> hyper``, one struct per parameter group, whose fields the host fills by name
    from :meth:`kernel_fields` (each declared hyperparameter under its name, plus what a subclass derives).

    Args:
        params: an iterable of Parameters, an object with ``parameters()``, or a list of dicts
            ``{"params": [...], **hyperparameters}`` (parameter groups, each with its own hyperparameters).
        max_grad_norm: when set (> 0), all gradients are scaled by ``min(1, max_grad_norm / (||g|| + 1e-6))``
            before the update, ``||g||`` the 2-norm over every parameter of this optimiser.
        skip_nonfinite: when True, a step whose gradients, or the values or state it computes, hold any NaN/Inf
            leaves parameters and state untouched (gradients are still zeroed) and is counted in
            ``skipped_steps``; in place (``double_buffer=False``) only non-finite gradients can be skipped,
            non-finite results are counted in ``nonfinite_results`` (see the module docstring).
        double_buffer: with ``skip_nonfinite``, keep values and state twice so the check rides on the update
            (one pass over the arena instead of a scan of the gradients first) and can undo a step whose
            result is non-finite; False saves that memory (4 bytes per parameter per copy of values and
            state) for an extra read of every gradient per step without clipping.
        poll_every: steps between host reads of the skipped-step count (each read waits for the GPU); 0
            never reads it during ``step``.

    Every hyperparameter is type-checked as well as range-checked (ValueError naming it): numbers must be
    int or float (not bool or str), flags True or False; a nonzero number must be a normal float32 (not one
    float32 stores as 0, a subnormal or Inf), here and in :meth:`load_state_dict`.
    """

    hyperparameters: ClassVar[tuple[Hyperparameter, ...]]   # torch's constructor order
    update_kernel: ClassVar[Kernel]   # the update's entry point; "<entry>_unchecked" beside it checks nothing
    has_lazy_kernels: ClassVar[bool] = False   # "<entry>_lazy" and "<entry>_unchecked_lazy" exist, compiled with a
                                               # rule's `lazy` option (used when a group sets it: see step)
    has_fold_kernels: ClassVar[bool] = False   # "<update entry><FOLD_ENTRIES suffix>" beside each update kernel
                                               # reads its gradients through a pending source's fold (HalfSumsFold,
                                               # FixedSumsFold: sopt.autodiff.grad_source)
    kernels: ClassVar[dict[str, Kernel]]   # every kernel of the class by role, from update_kernel (see _kernel)
    state_names: ClassVar[tuple[str, ...]]   # logical state slots, in the kernel's slot order

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "hyperparameters" in cls.__dict__:
            cls.__signature__ = signature(cls.hyperparameters)   # type: ignore[attr-defined]
        if "update_kernel" in cls.__dict__:
            update = cls.update_kernel
            cls.kernels = {"update": update, "update_unchecked": Kernel(update.source, f"{update.entry}_unchecked"),
                           **_SHARED_KERNELS}
            if cls.has_lazy_kernels:
                cls.kernels.update({f"{role}_lazy": Kernel(update.source, f"{cls.kernels[role].entry}_lazy")
                                    for role in ("update", "update_unchecked")})
            if cls.has_fold_kernels:
                cls.kernels.update({f"{role}{suffix}": Kernel(update.source, f"{cls.kernels[role].entry}{suffix}")
                                    for role in list(cls.kernels) if role.startswith("update")
                                    for suffix in FOLD_ENTRIES.values()})

    def __init__(self, params: Any, *args: Any, **kwargs: Any) -> None:
        # torch's TypeErrors for a missing, repeated or unknown argument
        bound = type(self).__signature__.bind(params, *args, **kwargs)   # type: ignore[attr-defined]
        bound.apply_defaults()
        arguments = bound.arguments
        self._setup(params, {h.key: arguments[h.key] for h in self.hyperparameters},
                    max_grad_norm=arguments["max_grad_norm"], skip_nonfinite=arguments["skip_nonfinite"],
                    double_buffer=arguments["double_buffer"], poll_every=arguments["poll_every"])

    def _setup(self, params: Any, defaults: dict[str, Any], *, max_grad_norm: float | None, skip_nonfinite: bool,
               double_buffer: bool, poll_every: int) -> None:
        # every option is checked before the first parameter group is taken
        if max_grad_norm is not None:
            max_grad_norm = check_float(max_grad_norm, "max_grad_norm", low=0.0, low_inclusive=False, float32=True)
        skip_nonfinite = check_bool(skip_nonfinite, "skip_nonfinite")
        double_buffer = check_bool(double_buffer, "double_buffer")
        poll_every = check_int(poll_every, "poll_every", low=0)
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = []
        for group in normalise_groups(params):
            self.add_param_group_config(group)
        self.max_grad_norm = max_grad_norm
        self.skip_nonfinite = skip_nonfinite
        self.double_buffer = double_buffer
        self.poll_every = poll_every
        self._slots: dict[str, int] = {}   # state name -> physical slot in the arena
        self._torch_link = _torch_link([p for g in self.param_groups for p in g["params"]])
        self.arena = ParameterArena([g["params"] for g in self.param_groups], double=self._pass in _DOUBLE_BUFFERED)
        # modules may leave gradient terms pending when the update can fold them; not with sopt.torch's link (torch
        # reads the arena's gradients itself)
        self.arena.accepts_pending = self.has_fold_kernels and self._torch_link is None
        self._ensure_states()
        if self._torch_link is not None:
            self._torch_link.after_step()   # torch parameters now view (or hold) the arena's values
        device = dev.get_device()
        self._ctl = device.create_buffer(size=4 * _CTL_WORDS, data=np.zeros(_CTL_WORDS, np.uint32),
                                         usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access)
        self._hyper: spy.Buffer | None = None   # the kernel's hyperparameter structs, made on the first step
        self._hyper_rows: list[Any] = [None, None]   # (update role, hyperparameters) each parity's row holds
        self._hyper_cursors: dict[str, tuple[Any, set[str], spy.BufferCursor]] = {}   # by role (_hyper_records)
        self._last_update_role = ""   # the update kernel's role in the last step (settings_changed)
        self._layout_key: tuple | None = None
        self._fields_of: tuple[tuple, list[dict[str, float | bool]]] | None = None   # (hyperparameters, fields)
        self._attempts = 0
        self._skipped_seen = 0
        self._results_seen = 0
        # kernels loaded so far, by role and the (src_side, dst_side) they are bound to: one per direction, so
        # that a step only writes the arguments that change every step (the parity); all bound to _bound_buffer
        self._bound: dict[tuple[str, int, int], dev.BoundKernel] = {}
        self._bound_buffer: spy.Buffer | None = None

    # -- parameter groups ------------------------------------------------------------------------------------
    def add_param_group_config(self, group: dict[str, Any]) -> None:
        """Check ``group`` (merged over the defaults) and append it; nothing changes when a check fails."""
        unknown = set(group) - set(self.defaults) - {"params", "initial_lr"}
        if unknown:
            raise ValueError(f"param group has unknown option(s) {sorted(unknown)}; allowed: {sorted(self.defaults)}")
        full = {**self.defaults, **group}
        if not full["params"]:
            raise ValueError(f"param group {len(self.param_groups)} has no parameters")
        if len(self.param_groups) >= MAX_GROUPS:
            raise ValueError(f"at most {MAX_GROUPS} parameter groups are supported, got more")
        self._check_group_float32(full)
        self.param_groups.append(full)

    def _check_group_float32(self, group: dict[str, Any]) -> None:
        """:meth:`check_group`, then every float hyperparameter of ``group`` (each element of a tuple such as
        ``betas``) must be 0 or a normal float32: the kernel reads them as float32, where ``lr=1e-50`` would be 0
        (no step at all) and ``lr=1e39`` Inf (every step spoilt). ValueError naming the key and the range."""
        self.check_group(group)
        for key, value in group.items():
            if key == "params":
                continue
            items = list(enumerate(value)) if isinstance(value, tuple) else [(None, value)]
            for i, item in items:
                if isinstance(item, float):
                    check_float32(item, key if i is None else f"{key}[{i}]", owner=type(self).__name__)

    def check_group(self, group: dict[str, Any]) -> None:
        """Validate a group's hyperparameters against their declarations (ValueError naming the argument and
        value) and store them as Python floats, bools and tuples. Subclasses check what relates several of them
        after calling this."""
        for h in self.hyperparameters:
            group[h.key] = h.check(group[h.key])
        if "initial_lr" in group:
            group["initial_lr"] = check_float(group["initial_lr"], "initial_lr", low=0.0)

    # -- subclass interface -------------------------------------------------------------------------------------
    def required_states(self) -> set[str]:
        """Names of the state slots the current hyperparameters need."""
        return set(self.state_names)

    def state_fill(self, name: str, group: dict[str, Any]) -> float:
        """Initial value of state ``name`` for parameters of ``group``."""
        return 0.0

    def kernel_fields(self, group: dict[str, Any]) -> dict[str, float | bool]:
        """The fields of the update kernel's hyperparameter struct for ``group``, by name: every declared
        hyperparameter (a pair as its two config keys). Subclasses add the values they derive on the host (in
        double precision, e.g. ``1 - beta``), from the group's hyperparameters only: a step calls this again only
        when one of them has changed."""
        fields: dict[str, float | bool] = {}
        for h in self.hyperparameters:
            fields.update(h.kernel_fields(group[h.key]))
        return fields

    # -- state slots and the control buffer ------------------------------------------------------------------------
    def _ensure_states(self, also: Iterable[str] = (), encoder: spy.CommandEncoder | None = None) -> None:
        """Allocate the state slots the current hyperparameters need (and ``also``), in the kernel's order; the
        arena's move into a larger buffer is recorded into ``encoder`` when given."""
        needed = self.required_states()
        if also:
            needed = needed | set(also)
        if needed <= self._slots.keys():   # every step after the first: nothing to allocate
            return
        for name in self.state_names:
            if name in needed and name not in self._slots:
                per_param = [np.full(p.shape, self.state_fill(name, g), np.float32)
                             for g in self.param_groups for p in g["params"]]
                self._slots[name] = self.arena.add_slot(self.arena.join(per_param), encoder)

    def _state_tensor(self, name: str) -> spy.Tensor:
        return self.arena.slot(self._slots[name])

    @property
    def _pass(self) -> int:
        """How this step checks its gradients (see the module docstring)."""
        double = self.skip_nonfinite and self.double_buffer
        if self.max_grad_norm is not None:
            return _PASS_STATS_CHECK if double else _PASS_STATS
        if not self.skip_nonfinite:
            return _PASS_NONE
        return _PASS_CHECK if double else _PASS_SCAN

    def _undoes_itself(self) -> bool:
        """Whether this step's update undoes a non-finite step itself (PASS_UNDO), without nonfinite_restore."""
        return self._pass in _DOUBLE_BUFFERED and self.arena.n_vec <= UNDO_MAX_VECTORS

    def _n_stat_groups(self) -> int:
        # about four float4 vectors per thread before the grid-stride loop repeats
        return max(1, min(STATS_GROUPS, -(-self.arena.n_vec // (4 * THREADS))))

    def _layout(self) -> tuple[tuple, np.ndarray | None, list[dict[str, float | bool]]]:
        """Words [16, 24 + MAX_GROUPS) of the control buffer (None when unchanged), every group's kernel fields,
        and a key that changes when either does."""
        # kernel_fields is a function of a group's hyperparameters: derived again only when one of them changed
        # (deriving it every step would add to each step's host time)
        key = self._settings_key()
        values = key[0]
        if self._fields_of is not None and self._fields_of[0] == values:
            fields = self._fields_of[1]
        else:
            fields = [self.kernel_fields(g) for g in self.param_groups]
            self._fields_of = (values, fields)
        # the words do not hold hyperparameters (their rows do: _hyper_row): only the number of groups counts
        if (self._layout_key is not None and key[1:] == self._layout_key[1:]
                and len(values) == len(self._layout_key[0])):
            return key, None, fields
        n_vec = self.arena.n_vec
        words = np.zeros(_CTL_GROUP_ENDS - _CTL_LAYOUT + MAX_GROUPS, np.uint32)
        undo = _PASS_UNDO if self._undoes_itself() else 0
        words[0:4] = [n_vec, len(self.param_groups), self._pass | undo, self._n_stat_groups()]
        words[4] = np.float32(self.max_grad_norm or 0.0).view(np.uint32)
        for logical, name in enumerate(self.state_names):
            if name in self._slots:
                words[5 + logical] = (2 + self._slots[name]) * n_vec
        ends = self.arena.group_end_vec
        words[_CTL_GROUP_ENDS - _CTL_LAYOUT:][:len(ends)] = ends
        return key, words, fields

    def _hyper_row(self, parity: int, update: str, values: tuple,
                   fields: list[dict[str, float | bool]]) -> tuple[spy.Buffer, int, np.ndarray] | None:
        """The upload (buffer, byte offset, records) of the groups' hyperparameter structs into row ``parity`` of
        the hyperparameter buffer (what a step of that parity reads), or None when the row holds them already
        (counted as written from here on)."""
        if self._hyper_rows[parity] == (update, values):
            return None
        records = self._hyper_records(update, fields)
        if self._hyper is None:
            self._hyper = dev.get_device().create_buffer(
                size=2 * records.nbytes, usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access)
        self._hyper_rows[parity] = (update, values)
        return self._hyper, parity * records.nbytes, records

    def hyper_inputs(self, steps: int, before_step: Callable[[int], None]) -> list[tuple[spy.Buffer, int, np.ndarray]]:
        """The hyperparameter rows of the next ``steps`` steps replayed from a CUDA graph (sopt.runtime.cuda_graph), to be
        uploaded before it launches: ``before_step(j)`` runs after step j's row is taken (a Trainer steps its
        scheduler there, as it does after a recorded step). Replayed steps keep the parity of the recorded ones, so
        step j reads row ``(attempts + 1 + j) % 2``."""
        update = self._update_role(self._pass)
        uploads = []
        for j in range(steps):
            key, _, fields = self._layout()
            row = self._hyper_row((self._attempts + 1 + j) % 2, update, key[0], fields)
            if row is not None:
                uploads.append(row)
            before_step(j)
        return uploads

    def _update_role(self, check: int) -> str:
        update = "update" if check != _PASS_NONE else "update_unchecked"
        if self.has_lazy_kernels and any(g.get("lazy") for g in self.param_groups):
            update += "_lazy"   # the rule's masking compiled in only where a group asks for it
        return update

    def _settings_key(self) -> tuple:
        """Every group's hyperparameters, the checks, the state slots and the arena's size: what a step uploads
        (the control words, the hyperparameter structs) when it changes."""
        keys = [h.key for h in self.hyperparameters]
        values = tuple(tuple(_frozen(g[k]) for k in keys) for g in self.param_groups)
        return (values, self._pass, self.max_grad_norm, tuple(sorted(self._slots.items())), self.arena.n_vec)

    def settings_changed(self) -> bool:
        """Whether the checks, the state slots, the arena or a hyperparameter that picks the kernels (a group's
        ``lazy``) changed since the last step() uploaded them: a CUDA graph captured before would replay the old
        ones. Other hyperparameters (a learning rate a scheduler set) are graph inputs (:meth:`hyper_inputs`)."""
        key = self._settings_key()
        return (self._layout_key is None or key[1:] != self._layout_key[1:]
                or self._update_role(self._pass) != self._last_update_role)

    def _hyper_records(self, role: str, fields: list[dict[str, float | bool]]) -> np.ndarray:
        """The groups' hyperparameter structs, bytes laid out as the ``role`` kernel reads them: SlangPy's
        BufferCursor over the element type of its entry point's ``hyper`` parameter, written field by field by
        name (the struct's order and the backend's layout are the compiler's business, not the host's)."""
        made = self._hyper_cursors.get(role)
        if made is None:   # the layout and a cursor over it, once per role (a replay writes rows every step)
            kernel = self.kernels[role].load()
            parameters = {p.name: p for p in kernel.program.layout.entry_points[0].parameters}
            layout = parameters["hyper"].type_layout.element_type_layout
            made = self._hyper_cursors[role] = (layout, {f.name for f in layout.fields},
                                                spy.BufferCursor(dev.get_device().info.type, layout, MAX_GROUPS))
        layout, declared, cursor = made
        for k, group in enumerate(fields):
            if set(group) != declared:   # the class and its kernel disagree: a bug of the optimiser, not of a config
                raise TypeError(f"{type(self).__name__}.kernel_fields gives {sorted(group)}, but the struct "
                                f"{layout.name} of {self.update_kernel.source.label} has {sorted(declared)}")
            record = cursor[k]
            for name, value in group.items():
                with np.errstate(over="ignore"):   # a finite value beyond float32 becomes inf: the checked
                    record[name] = value if isinstance(value, bool) else float(np.float32(value))   # update
        return cursor.to_numpy().copy()   # reports the step it spoils; a copy: the cursor is written again

    # -- the step ---------------------------------------------------------------------------------------------
    def step(self, encoder: spy.CommandEncoder | None = None) -> None:
        """One update of every parameter; gradients are zero afterwards.

        With ``encoder`` the dispatches are recorded into it (the caller submits); otherwise they are
        submitted now. The host does not wait for the GPU. With a double-buffered arena the Parameters' views
        move to the side this step writes as soon as it is recorded: read or load values only after the encoder
        is submitted.
        """
        own = encoder is None
        link = self._torch_link
        if link is not None:
            link.check_encoder(not own)
        if own:
            encoder = dev.create_command_encoder()
        if link is not None:
            link.before_step(encoder)   # torch gradients (and values torch changed) into the arena
        self._ensure_states(encoder=encoder)
        check = self._pass
        arena = self.arena
        double = check in _DOUBLE_BUFFERED
        if double or not self.double_buffer:
            # the second side is allocated when a step first needs it and dropped with double_buffer=False
            arena.set_double(double, encoder)
        buffer = arena.buffer
        if buffer is not self._bound_buffer:
            self._bound.clear()   # kernels bound to a previous buffer would keep it alive
            self._bound_buffer = buffer
        update = self._update_role(check)
        fold, fold_entry = self._take_fold(check, encoder)
        key, words, fields = self._layout()
        if words is not None:
            # recorded in the command stream, so steps still in flight keep the values they were given
            dev.upload(encoder, self._ctl, 4 * _CTL_LAYOUT, words)
            self._layout_key = key
        self._attempts += 1
        self._last_update_role = update
        row = self._hyper_row(self._attempts % 2, update, key[0], fields)
        if row is not None:   # a graph's input when captured: written before each replay instead (hyper_inputs)
            dev.upload(encoder, *row, graph_input=True)
        arena.version += 1   # every parameter's values change (sopt.Tape's check)
        src = arena.side_offset(arena.side)
        dst = arena.side_offset(arena.side ^ 1) if double else src
        if check in (_PASS_STATS, _PASS_STATS_CHECK):
            self._kernel("stats").set(arena=buffer).dispatch(self._n_stat_groups() * THREADS, encoder)
        elif check == _PASS_SCAN:
            n_groups = -(-arena.n_vec // (SCAN_PER_THREAD * THREADS))
            self._kernel("scan").set(arena=buffer, parity=self._attempts % 2).dispatch(n_groups * THREADS, encoder)
        if fold is None:
            self._kernel(update, src, dst).set(arena=buffer, parity=self._attempts % 2).dispatch(arena.n_vec, encoder)
        else:
            self._kernel(update + fold_entry, src, dst).set(arena=buffer, parity=self._attempts % 2,
                                                            fold=fold).dispatch(arena.n_vec, encoder)
        for p in arena.params:   # zero-on-step: every gradient holds +0 after the update (skipped or not)
            p.mark_grad_zero()
        if double:
            if not self._undoes_itself():
                side_vectors = arena.side_offset(1)
                threads = min(RESTORE_GROUPS, -(-side_vectors // THREADS)) * THREADS
                self._kernel("restore", src, dst).set(arena=buffer, parity=self._attempts % 2,
                                                      restore_threads=threads).dispatch(threads, encoder)
            arena.flip()
        if own:
            dev.submit(encoder)
        if link is not None:
            link.after_step()   # torch parameters follow the values the step wrote
        if check != _PASS_NONE and self.poll_every > 0 and self._attempts % self.poll_every == 0:
            self.poll_skipped()

    def _take_fold(self, check: int, encoder: spy.CommandEncoder) -> tuple[dict[str, Any] | None, str]:
        """The fold arguments of the one pending gradient source this step's update consumes (None: the plain
        update) and the suffix of the update kernels that fold its kind (FOLD_ENTRIES); every other pending source
        is flushed into ``encoder`` first (sopt.autodiff.grad_source): all of them when the update cannot fold (no fold
        kernels, or a pass before the update that reads the gradients)."""
        pending = self.arena.pending
        if not pending:
            return None, ""
        can_fold = self.has_fold_kernels and check in (_PASS_NONE, _PASS_CHECK)
        chosen = None
        for p in list(pending):
            first = self.arena.offsets[self.arena.params.index(p)]
            if (can_fold and chosen is None and p.pending_grad.kind in FOLD_ENTRIES and first % 4 == 0
                    and p.pending_grad.entries == p.size):
                chosen = (p, first // 4)
            else:
                p.flush_grad(encoder)
        if chosen is None:
            return None, ""
        p, first_vec = chosen
        source = p.take_pending()
        return source.fold_args(first_vec), FOLD_ENTRIES[source.kind]

    def flush_pending(self, encoder: spy.CommandEncoder | None = None) -> None:
        """Add every pending gradient term into the arena's gradients (sopt.autodiff.grad_source): recorded into
        ``encoder``, or submitted now."""
        for p in list(self.arena.pending):
            p.flush_grad(encoder)

    def _kernel(self, role: str, src_side: int = 0, dst_side: int = 0) -> dev.BoundKernel:
        """The kernel of ``role`` ("update", "update_unchecked", "stats", "scan", "restore" or "fill"), loaded and
        bound on first use; an update or restore is bound to the arena sides it reads (``src_side``) and writes
        (``dst_side``). "update_unchecked" is the update without the non-finite bookkeeping, for steps that
        check nothing."""
        bound = self._bound.get((role, src_side, dst_side))
        if bound is None:
            kernel = self.kernels[role].load()
            sides = {"src_side": src_side, "dst_side": dst_side} if role.startswith(("update", "restore")) else {}
            hyper = {"hyper": self._hyper} if role.startswith("update") else {}
            bound = dev.BoundKernel(kernel, **({} if role == "fill" else {"ctl": self._ctl}), **sides, **hyper)
            self._bound[(role, src_side, dst_side)] = bound
        return bound

    def zero_grad(self) -> None:
        """Set every gradient to zero (``step()`` already does this as it consumes them). Over torch parameters
        (sopt.torch) their ``.grad`` may become None instead, as torch's ``zero_grad`` does (see
        sopt.torch.optimizer_link)."""
        if self._torch_link is not None and self._torch_link.zero_grad():
            return   # every gradient is cleared before it is next added to or read: no dispatch now
        n_vec = self.arena.n_vec
        encoder = dev.create_command_encoder()
        self.flush_pending(encoder)   # pending terms are discarded: flushed (which clears them), then filled over
        self._kernel("fill").set(arena=self.arena.buffer, fill_first=0, fill_count=n_vec,
                                 fill_value=0.0).dispatch(n_vec, encoder)
        dev.submit(encoder)
        for p in self.arena.params:
            p.mark_grad_zero()

    def _restart_counts(self, step: int, skipped: int) -> None:
        """Continue from ``step`` applied and ``skipped`` skipped steps (load_state_dict): a fresh control buffer
        holding the skipped count, the layout uploaded again on the next step."""
        self._attempts = step + skipped
        dev.invalidate_graphs("an optimiser's load_state_dict (its control words were rewritten)")
        ctl = np.zeros(_CTL_WORDS, np.uint32)
        ctl[_CTL_SKIPPED] = skipped
        ctl[_CTL_ATTEMPTS + (self._attempts + 1) % 2] = self._attempts   # what the next step's update reads
        self._ctl.copy_from_numpy(ctl)
        self._layout_key = None
        self._hyper_rows = [None, None]
        self._skipped_seen = skipped
        self._results_seen = 0   # the counter restarts from zero with the control buffer

    # -- skipped steps -----------------------------------------------------------------------------------------
    def _read_ctl(self) -> np.ndarray:
        return self._ctl.to_numpy().view(np.uint32).copy()

    @property
    def skipped_steps(self) -> int:
        """Steps skipped, and undone, because gradients, or the values or state the update wrote, held a
        NaN/Inf (waits for the GPU)."""
        return int(self._read_ctl()[_CTL_SKIPPED])

    @property
    def nonfinite_results(self) -> int:
        """Steps that wrote a NaN/Inf into values or state and could not be undone (``double_buffer=False``, or
        ``skip_nonfinite=False`` with ``max_grad_norm``; see the module docstring). Waits for the GPU."""
        return int(self._read_ctl()[_CTL_RESULTS])

    @property
    def phase(self) -> int:
        """The parity of the next step's kernels (its hyperparameter row and control words), which alternates with
        every recorded step: a captured graph replays only from the phase it was captured in."""
        return self._attempts % 2

    @property
    def step_count(self) -> int:
        """Steps applied so far (step() calls minus skipped steps; waits for the GPU)."""
        ctl = self._read_ctl()
        return self._device_attempts(ctl) - int(ctl[_CTL_SKIPPED])

    def _device_attempts(self, ctl: np.ndarray) -> int:
        """step() calls so far as the GPU counted them (control words ``ctl``): the host's own count, ``_attempts``,
        misses the steps replayed from a CUDA graph (sopt.runtime.cuda_graph), which keep its parity (an even number)."""
        return int(ctl[_CTL_ATTEMPTS + (self._attempts + 1) % 2])

    def poll_skipped(self) -> int:
        """Read the skipped-step and non-finite-result counts; warn (once per optimiser and kind) when one has
        grown. Returns the skipped-step count."""
        ctl = self._read_ctl()
        skipped, results = int(ctl[_CTL_SKIPPED]), int(ctl[_CTL_RESULTS])
        name = type(self).__name__
        if skipped > self._skipped_seen and self._skipped_seen == 0:
            warnings.warn(f"{name}: {skipped} step(s) skipped so far because gradients, or the values or optimiser "
                          "state the update computed from them, held NaN or Inf (for the latter: a learning rate "
                          "or update too large for float32); parameters and optimiser state were left unchanged "
                          "on those steps (see optimizer.skipped_steps)", RuntimeWarning, stacklevel=2)
        if results > self._results_seen and self._results_seen == 0:
            warnings.warn(f"{name}: {results} step(s) wrote NaN or Inf into parameters or optimiser state (the update "
                          "overflowed float32, e.g. a learning rate too large), which an in-place update cannot "
                          "undo: parameters now hold non-finite values (see optimizer.nonfinite_results; the "
                          "default double_buffer=True skips such steps instead)", RuntimeWarning, stacklevel=2)
        self._skipped_seen = max(self._skipped_seen, skipped)
        self._results_seen = max(self._results_seen, results)
        return skipped

    # -- config (sopt.config.registry) ---------------------------------------------------------------------------
    @classmethod
    def config_to_options(cls, config: Any) -> dict[str, Any]:
        """The constructor's hyperparameters (``lr``, ``betas``, ...) from a config of this optimiser: those with a
        config key."""
        return {h.key: h.from_config(config) for h in cls.hyperparameters if h.config_key is not None}

    @classmethod
    def options_to_config(cls, group: dict[str, Any]) -> dict[str, Any]:
        """The config's keys (``learning_rate``, ``beta1``, ...) from a param group's hyperparameters."""
        config: dict[str, Any] = {}
        for h in cls.hyperparameters:
            config.update(h.to_config(group[h.key]))
        return config

    @classmethod
    def from_config(cls, config: Any, params: Any) -> "Optimizer":
        """The optimiser ``config`` (its registered config model, tiny-cuda-nn's keys) describes, over ``params``."""
        return cls(params, **cls.config_to_options(config), max_grad_norm=config.max_grad_norm,
                   skip_nonfinite=config.skip_nonfinite, double_buffer=config.double_buffer)

    def to_config(self) -> Any:
        """The config that rebuilds this optimiser (``from_config(opt.to_config(), params)``): its hyperparameters,
        the lr a schedule started from (``initial_lr``), and the clipping and non-finite options.

        ValueError when a config cannot say it: param groups with different hyperparameters, or an option the
        config has no key for (e.g. ``maximize=True``)."""
        name = type(self).__name__
        first = self.param_groups[0]
        options = {k: first[k] for k in self.defaults}
        options["lr"] = first.get("initial_lr", first["lr"])
        for i, group in enumerate(self.param_groups[1:], 1):
            mine = {**{k: group[k] for k in self.defaults}, "lr": group.get("initial_lr", group["lr"])}
            differ = sorted(k for k in options if mine[k] != options[k])
            if differ:
                raise ValueError(f"{name}.to_config: param group {i} differs from group 0 in {differ}; a config "
                                 "describes one set of hyperparameters")
        config = type(self).config_class(**self.options_to_config(options),   # type: ignore[attr-defined]
                                         max_grad_norm=self.max_grad_norm, skip_nonfinite=self.skip_nonfinite,
                                         double_buffer=self.double_buffer)
        rebuilt = {h.key: h.default for h in self.hyperparameters} | self.config_to_options(config)
        lost = sorted(k for k in options if rebuilt[k] != options[k])
        if lost:
            raise ValueError(f"{name}.to_config: {', '.join(f'{k}={options[k]!r}' for k in lost)} has no config key "
                             f"(a config gives {', '.join(f'{k}={rebuilt[k]!r}' for k in lost)})")
        return config

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(g.items()) if k != "params"]
        return "\n".join(lines + [")"])
