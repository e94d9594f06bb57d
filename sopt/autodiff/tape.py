"""Tape: records a step's differentiable GPU calls into one command encoder and their backward in reverse.

Modelled on NVIDIA Warp's ``wp.Tape`` and torch autograd, with sopt's GPU discipline::

    tape = sopt.Tape()                     # keep one tape across steps: its arrays are reused
    for step in range(steps):
        with tape:                         # every call below is recorded, nothing runs yet
            y = model(x)                   # sopt.nn modules, losses, simulator steps, user Slang functions
            loss = sopt.losses.MSELoss()(y, target)
        tape.backward(loss)                # every call's backward, in reverse, into the same encoder
        opt.step(tape.encoder)             # the optimiser's step too (it zeroes the gradients)
        tape.submit()                      # one submission for the whole iteration
        print(loss.item())                 # reading waits for the GPU

What a recorded call owns: the arrays it outputs and what its backward reads come from the tape's **pool**,
indexed by the order of allocation within a step. The next step (``with tape:`` after ``submit``, or
``reset()``) hands out the same arrays again, so a step with a fixed structure allocates nothing in steady
state; one module may be called any number of times (each call gets its own output).

Gradient conventions (``backward``): Parameters accumulate (``+=``) into their gradient, which the optimiser's
step clears (zero-on-step). An intermediate array's gradient is written by the first backward that reaches it
and added to by the others, so a module called twice, or a state read by two calls, gets the sum. Backward
work whose outputs received no gradient is skipped.

Safety: every array has a version counter. A recorded call that writes an array another call saved for its
backward raises :class:`TapeError` at once, naming both calls (Warp's most reported trap: gradients silently
computed from overwritten values); so does a Parameter changed (``load``, an optimiser step) between a
call's forward and ``backward``.

Extending: :func:`record` is the one primitive: a forward recorded now, a backward (a hand-written adjoint or
``.bwds``) recorded by ``backward`` later, with the arrays it reads, writes and adds gradients into.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import slangpy as spy

from sopt.runtime import device as dev
from sopt.autodiff import grad_max
from sopt.runtime.kernel import Function, grid_1d, launch
from sopt.autodiff.parameter import Parameter


_FILL = Function("tape", "tape_fill")   # slang_lib/tape.slang: t = value
_ADD = Function("tape", "tape_add")     # dst += src


class TapeError(ValueError):
    """A tape used in a way that would give wrong gradients (an overwritten saved array, a bad seed)."""


# -- device memory sopt allocates for tapes and rollouts (what memory budgets count) ----------------------------
_pools: "weakref.WeakSet[Pool]" = weakref.WeakSet()
_peak_bytes = 0


def allocated_bytes() -> int:
    """Bytes held by every live tape pool (outputs, saved arrays and their gradients; rollout state slots)."""
    return sum(p.bytes for p in list(_pools))


def peak_allocated_bytes() -> int:
    """The largest :func:`allocated_bytes` since the process started or :func:`reset_peak_allocated_bytes`."""
    return max(_peak_bytes, allocated_bytes())


def reset_peak_allocated_bytes() -> None:
    global _peak_bytes
    _peak_bytes = allocated_bytes()


def _note_growth() -> None:
    global _peak_bytes
    _peak_bytes = max(_peak_bytes, allocated_bytes())


def _nbytes(shape: tuple[int, ...], grads: bool) -> int:
    return 4 * int(np.prod(shape)) * (2 if grads else 1)


class Pool:
    """Arrays handed out in order; :meth:`rewind` makes the next requests reuse them (same shape: same array)."""

    def __init__(self) -> None:
        self._arrays: list[tuple[tuple[int, ...], bool, spy.Tensor]] = []   # (shape, grads, array)
        self._cursor = 0
        self.bytes = 0
        _pools.add(self)

    def take(self, shape: tuple[int, ...], grads: bool) -> spy.Tensor:
        i = self._cursor
        self._cursor += 1
        if i < len(self._arrays):
            old_shape, old_grads, t = self._arrays[i]
            if old_shape == shape and old_grads == grads:
                return t
            self.bytes -= _nbytes(old_shape, old_grads)
        t = _allocate(shape, grads)
        if i < len(self._arrays):
            self._arrays[i] = (shape, grads, t)
        else:
            self._arrays.append((shape, grads, t))
        self.bytes += _nbytes(shape, grads)
        _note_growth()
        return t

    def rewind(self) -> None:
        self._cursor = 0

    def release(self) -> None:
        """Drop every array (the memory goes back to the device once nothing else holds them)."""
        self._arrays.clear()
        self._cursor = 0
        self.bytes = 0


# -- which tape is recording -----------------------------------------------------------------------------------
_stack: list["Tape"] = []


def current_tape() -> "Tape | None":
    """The tape recording now (innermost ``with tape:``), or None."""
    return _stack[-1] if _stack and _stack[-1]._recording else None


def new_tensor(shape: Sequence[int], grads: bool = True) -> spy.Tensor:
    """A float32 array for a call's output: from the recording tape's pool, else a new zeroed tensor.

    ``grads``: attach a gradient buffer of the same shape (outputs that may be differentiated need one).
    """
    if type(shape) is not tuple:
        shape = tuple(int(s) for s in shape)
    tape = current_tape()
    if tape is not None:
        return tape._pool.take(shape, grads)
    return _allocate(shape, grads)


def _allocate(shape: tuple[int, ...], grads: bool) -> spy.Tensor:
    t = spy.Tensor.zeros(dev.get_device(), shape, "float")
    return t.with_grads(zero=True) if grads else t


def _key(t: spy.Tensor) -> tuple[int, int]:
    return (id(t.storage), int(t.offset))


def flat(t: spy.Tensor) -> spy.Tensor:
    """A 1-D view of all of ``t``'s elements (contiguous tensors)."""
    return t.view((_numel(t),))


def _label(t: spy.Tensor) -> str:
    return f"array of shape {tuple(t.shape)}"


class _Node:
    """One recorded call: ``writes`` (outputs), ``add_grads`` / ``write_grads`` (arrays whose gradient the
    backward adds into / overwrites), ``params`` (Parameters read, with their version at record time),
    ``always`` (a probe: its backward runs even when no gradient flows through it), ``saved`` ((record, version,
    array) of what the backward reads)."""

    __slots__ = ("index", "name", "backward", "writes", "add_grads", "write_grads", "params", "always", "saved")

    def __init__(self, index: int, name: str, backward: Callable[[spy.CommandEncoder, dict[int, spy.Tensor]], None] | None,
                 writes: list[spy.Tensor], add_grads: list[spy.Tensor], write_grads: list[spy.Tensor],
                 params: list[tuple[Parameter, int]], always: bool) -> None:
        self.index, self.name, self.backward, self.writes = index, name, backward, writes
        self.add_grads, self.write_grads, self.params, self.always = add_grads, write_grads, params, always
        self.saved: list[tuple[_Info, int, spy.Tensor]] = []


class _Info:
    __slots__ = ("version", "saved_by", "requires_grad", "grad_ready", "producer")

    def __init__(self) -> None:
        self.version = 0
        self.saved_by: _Node | None = None
        self.requires_grad = False
        self.grad_ready = False
        self.producer: _Node | None = None


class Tape:
    """Records differentiable calls (see the module docstring). Not thread-safe; tapes nest (innermost records).

    Attributes: ``encoder`` (the command encoder of the current step, created on entry), ``nodes`` (the
    recorded calls, in order; for inspection), ``metrics`` (values a call asked to report: numbers, arrays,
    loss values, or functions returning a value or a dict of them, called only when the Trainer reads
    metrics; e.g. a rollout's gradient norms).
    """

    def __init__(self, encoder: spy.CommandEncoder | None = None) -> None:
        # True on a tape whose backward never runs (a rollout's recompute-forward passes): a call may then skip
        # saving what only its backward needs (a fused multi-step kernel's trajectory)
        self.forward_only = False
        self._pool = Pool()
        self._outer_encoder = encoder
        self.encoder: spy.CommandEncoder | None = encoder
        self.nodes: list[_Node] = []
        self._info: dict[tuple[int, int], _Info] = {}
        self._by_id: dict[int, _Info] = {}
        self._seen: list[spy.Tensor] = []
        self._recording = False
        self._submitted = False
        self._backward_done = False
        self._seeded: list[Any] = []     # LossValues whose gradient was written during the forward
        self._children: dict[Any, Tape] = {}
        self.metrics: dict[str, Any] = {}

    # -- recording ---------------------------------------------------------------------------------------------
    def __enter__(self) -> "Tape":
        if self._recording:
            raise TapeError("this tape is already recording (a 'with tape:' inside another on the same tape)")
        if self._submitted or self._backward_done:
            self.reset()
        if self.encoder is None:
            self.encoder = dev.create_command_encoder()
        self._recording = True
        _stack.append(self)
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self._recording = False
        _stack.remove(self)
        if exc_type is not None:   # a step that failed half-way is dropped, not continued by the next 'with'
            self.reset()

    def reset(self) -> None:
        """Forget the recorded calls (and an unsubmitted encoder); the next step reuses this tape's arrays."""
        if self._recording:
            raise TapeError("reset() inside 'with tape:'")
        self.nodes = []
        self._info = {}
        self._by_id = {}
        self._seen = []
        self._seeded = []
        self._pool.rewind()
        self.encoder = self._outer_encoder
        self._submitted = False
        self._backward_done = False
        self.metrics = {}
        for child in self._children.values():
            child.reset()

    def child(self, key: Any) -> "Tape":
        """A tape recording into this tape's encoder with a pool of its own, kept across steps under ``key``
        (a rollout's recompute segments use one, so their arrays are reused segment after segment)."""
        tape = self._children.get(key)
        if tape is None:
            tape = self._children[key] = Tape(encoder=self.encoder)
        tape._outer_encoder = self.encoder
        if tape.encoder is not self.encoder:
            tape.encoder = self.encoder
        return tape

    def release(self) -> None:
        """Give the pooled arrays back to the device (the next step allocates again)."""
        self.reset()
        self._pool.release()
        for child in self._children.values():
            child.release()

    @property
    def pool_bytes(self) -> int:
        """Device bytes this tape (and its children) hold for outputs, saved arrays and gradients."""
        return self._pool.bytes + sum(c.pool_bytes for c in self._children.values())

    def _info_of(self, t: spy.Tensor) -> _Info:
        # by object first: finding a tensor's storage and offset costs two native calls; views of the same
        # memory share one _Info through that key (the tape keeps every tensor it saw alive until reset, so an
        # id is not reused meanwhile)
        info = self._by_id.get(id(t))
        if info is None:
            k = _key(t)
            info = self._info.get(k)
            if info is None:
                info = self._info[k] = _Info()
                info.requires_grad = t.grad_out is not None
            self._by_id[id(t)] = info
            self._seen.append(t)
        return info

    def _known(self, t: spy.Tensor) -> _Info | None:
        """The tape's record of ``t``'s memory, or None when no call touched it (nothing is created)."""
        info = self._by_id.get(id(t))
        return info if info is not None else self._info.get(_key(t))

    def requires_grad(self, t: spy.Tensor) -> bool:
        """Whether a gradient can flow into ``t`` from this tape's calls' inputs: it was written by a call
        that reads a Parameter or such an array, or it is a leaf array carrying a gradient buffer."""
        info = self._known(t)
        if info is not None:
            return info.requires_grad
        return t.grad_out is not None

    def record(self, name: str, forward: Callable[[spy.CommandEncoder], None],
               backward: Callable[[spy.CommandEncoder, dict[int, spy.Tensor]], None] | None, *,
               reads: Iterable[spy.Tensor] = (), writes: Iterable[spy.Tensor] = (),
               add_grads: Iterable[spy.Tensor] = (), write_grads: Iterable[spy.Tensor] = (),
               params: Iterable[Parameter] = (), always: bool = False) -> _Node:
        """Record one call: ``forward(encoder)`` now, ``backward(encoder, redirect)`` at :meth:`backward`.

        - ``reads``: arrays the backward reads (their versions are saved: a later write raises TapeError);
        - ``writes``: arrays the forward writes (outputs); the backward reads their ``.grad`` (dL/doutput),
          which the tape guarantees holds the gradient (zero where nothing flowed);
        - ``add_grads``: arrays whose ``.grad`` the backward adds dL/darray into (the tape zeroes it first
          when it is the first contribution);
        - ``write_grads``: arrays whose ``.grad`` the backward overwrites; when another call already wrote
          there, the tape passes ``redirect[i]`` (i = position in ``write_grads``), the same array with a
          scratch gradient, and adds the scratch in afterwards; an entry that needs no gradient is
          redirected to the array detached (no gradient buffer: the backward must then skip dL/dx);
        - ``params``: Parameters read (the backward adds into their ``.grad``);
        - ``always``: a probe (e.g. a gradient-norm reading of ``reads``): its backward runs at its place in the
          reverse order whatever flowed, with the gradients of ``reads`` initialised (zero where nothing flowed).
        """
        if not self._recording:
            raise TapeError(f"{name}: the tape is not recording; record inside 'with tape:'")
        reads, writes = list(reads), list(writes)
        add_grads, write_grads = list(add_grads), list(write_grads)
        params = list(params)
        node = _Node(len(self.nodes), name, backward, writes, add_grads, write_grads,
                     [(p, p.version) for p in params], always)
        for t in writes:   # a write into an array a call saved for its backward spoils that backward
            info = self._info_of(t)
            if info.saved_by is not None:
                first = info.saved_by
                raise TapeError(
                    f"{name} (call #{node.index} on this tape) writes an {_label(t)} that {first.name} (call "
                    f"#{first.index}) saved for its backward (version {info.version}); its gradient would be "
                    "computed from overwritten values. Write into a new array instead (let the call allocate its "
                    "output, or take one from sopt.autodiff.tape.new_tensor), or record the step on a new tape.")
        for t in reads:
            info = self._info_of(t)
            node.saved.append((info, info.version, t))
            if info.saved_by is None:
                info.saved_by = node
        forward(self.encoder)
        grad_in = bool(params) or any(self.requires_grad(t) for t in add_grads + write_grads)
        for t in writes:
            info = self._info_of(t)
            info.version += 1
            info.producer = node
            info.requires_grad = grad_in and t.grad_out is not None
        self.nodes.append(node)
        return node

    def seed_loss(self, value: Any, pred: spy.Tensor) -> None:
        """Declare ``value`` a loss whose kernel wrote dLoss/dpred into ``pred.grad`` during the forward (sopt's
        losses call it; so does the Trainer for a loss following the pre-tape contract)."""
        self._seeded.append(value)
        self._info_of(pred).grad_ready = True

    def is_seed(self, value: Any) -> bool:
        """Whether ``value`` was declared a loss on this tape (:meth:`seed_loss`)."""
        return any(value is s for s in self._seeded)

    def seeded_before(self, pred: spy.Tensor) -> bool:
        """Whether a loss already wrote into ``pred.grad`` on this tape (a second loss must add)."""
        info = self._known(pred)
        return info is not None and info.grad_ready

    # -- backward ----------------------------------------------------------------------------------------------
    def backward(self, loss: Any = None, grads: Any = None) -> None:
        """Record the backward of every recorded call, in reverse, into ``self.encoder`` (not submitted).

        ``loss``: a sopt loss's value (its gradient was written when it was computed), a float32 array whose
        elements are summed (every element's gradient seeded with 1, as torch's ``backward()`` of a sum or
        Warp's ``tape.backward(loss)``), or a list of those (their sum). Every sopt loss recorded on this tape
        must be among them. ``grads``: ``{array: dL/darray}`` seeds (numpy arrays, tensors of its shape or
        numbers), as ``torch.autograd.backward(tensors, grad_tensors)``; also a list of (array, gradient)
        pairs, where seeds of the same array add up.

        Everything is checked before anything is recorded: a saved array overwritten since (TapeError), a
        Parameter changed since its call, a seed of the wrong shape.
        """
        if self._recording:
            raise TapeError("backward() inside 'with tape:'; call it after the block")
        if self._backward_done:
            raise TapeError("backward() was already recorded for this step; reset() or a new 'with tape:' first")
        if self.encoder is None:
            raise TapeError("nothing was recorded on this tape (use 'with tape:' before backward())")
        losses = list(loss) if isinstance(loss, (list, tuple)) else ([] if loss is None else [loss])
        seeds: list[tuple[spy.Tensor, Any]] = []
        loss_values = []
        for i, item in enumerate(losses):
            if isinstance(item, spy.Tensor):
                seeds.append((item, 1.0))
            elif any(item is s for s in self._seeded):
                loss_values.append(item)
            else:
                raise TapeError(f"backward: loss[{i}] must be a loss value computed on this tape or a float32 "
                                f"tensor, got {type(item).__name__} (not computed on this tape)")
        missing = [s for s in self._seeded if not any(s is v for v in loss_values)]
        if missing:
            raise TapeError(f"backward: this tape recorded {len(self._seeded)} loss(es) but {len(missing)} of them "
                            f"({', '.join(getattr(m, 'name', 'loss') for m in missing)}) is not among those given; a "
                            "sopt loss writes its gradient when computed, so pass every one: tape.backward([l1, l2]) "
                            "differentiates their sum")
        for t, g in (grads.items() if isinstance(grads, dict) else (grads or [])):
            if not isinstance(t, spy.Tensor):
                raise TapeError(f"backward: grads keys must be tensors recorded on this tape, got {type(t).__name__}")
            seeds.append((t, g))
        if not seeds and not loss_values:
            raise TapeError("backward: give a loss (a sopt loss value or a tensor) or grads={array: gradient}")
        prepared = []
        for t, g in seeds:
            if t.grad_out is None:
                raise TapeError(f"backward: the seeded {_label(t)} has no gradient buffer; seed a call's output")
            if isinstance(g, (int, float)):
                prepared.append((t, float(g)))
                continue
            if isinstance(g, spy.Tensor):
                if tuple(g.shape) != tuple(t.shape):
                    raise TapeError(f"backward: the gradient for an {_label(t)} has shape {tuple(g.shape)}")
                prepared.append((t, g))
                continue
            from sopt.utils.validation import as_float32_array
            prepared.append((t, as_float32_array(g, "backward grads value", tuple(t.shape))))
        self._check_versions()
        enc = self.encoder
        for t, g in prepared:
            info = self._info_of(t)
            if isinstance(g, float):
                self._fill(enc, t.grad, g, add=info.grad_ready)
            elif isinstance(g, spy.Tensor):
                if info.grad_ready:
                    add_into(enc, g, t.grad)
                else:
                    copy_into(enc, g, t.grad)
            else:
                if info.grad_ready:
                    scratch = self._pool.take(t.shape.as_tuple(), False)
                    dev.upload(enc, scratch.storage, 4 * scratch.offset, np.ascontiguousarray(g))
                    add_into(enc, scratch, t.grad)
                else:
                    dev.upload(enc, t.grad.storage, 4 * t.grad.offset, np.ascontiguousarray(g))
            info.grad_ready = True
        self._backward_done = True
        for node in reversed(self.nodes):
            self._backward_node(node)

    def _check_versions(self) -> None:
        for node in self.nodes:
            for info, version, t in node.saved:
                now = info.version
                if now != version:
                    writer = info.producer
                    raise TapeError(f"backward: {node.name} (call #{node.index}) saved an {_label(t)} at version "
                                    f"{version}, but {writer.name if writer else 'a later call'} overwrote it "
                                    f"(version {now}); its gradient would be wrong")
            for p, version in node.params:
                if p.version != version:
                    raise TapeError(f"backward: Parameter {p.name!r} changed (loaded or stepped by an optimiser) "
                                    f"after {node.name} (call #{node.index}) read it and before backward(); "
                                    "record the optimiser's step after backward()")

    def grad(self, t: spy.Tensor) -> spy.Tensor:
        """``t.grad`` during or after :meth:`backward`, zeroed first (recorded) when no gradient reached ``t``."""
        info = self._info_of(t)
        if not info.grad_ready:
            clear(self.encoder, t.grad)
            info.grad_ready = True
        return t.grad

    def _backward_node(self, node: _Node) -> None:
        if node.backward is None:
            return
        if node.always:
            for _, _, t in node.saved:
                if t.grad_out is not None:
                    self.grad(t)
            node.backward(self.encoder, {})
            return
        wants = bool(node.params) or any(self._info_of(t).requires_grad for t in node.add_grads + node.write_grads)
        if not wants:
            return
        outs = [self._info_of(t) for t in node.writes]
        if node.writes and not any(i.grad_ready for i in outs):
            return   # no gradient reached this call's outputs
        enc = self.encoder
        for t, info in zip(node.writes, outs):
            if not info.grad_ready and t.grad_out is not None:
                clear(enc, t.grad)
                info.grad_ready = True
        for t in node.add_grads:
            info = self._info_of(t)
            if info.requires_grad and not info.grad_ready:
                clear(enc, t.grad)
                info.grad_ready = True
            elif info.requires_grad:
                grad_max.touched(t.grad)   # added to after its writer: a max raised with it no longer covers it
        redirect: dict[int, spy.Tensor] = {}
        pending: list[tuple[spy.Tensor, spy.Tensor]] = []
        for i, t in enumerate(node.write_grads):
            info = self._info_of(t)
            if not info.requires_grad:
                redirect[i] = t.detach() if t.grad_out is not None else t
            elif info.grad_ready:
                scratch = self._pool.take(t.shape.as_tuple(), False)
                redirect[i] = t.detach().with_grads(grad_in=scratch, grad_out=scratch, zero=False)
                pending.append((scratch, t.grad))
                grad_max.touched(t.grad)
            else:
                redirect[i] = t
                info.grad_ready = True
        node.backward(enc, redirect)
        for scratch, grad in pending:
            add_into(enc, scratch, grad)

    # -- the tape's own kernels --------------------------------------------------------------------------------
    def _fill(self, enc: spy.CommandEncoder, dst: spy.Tensor, value: float, add: bool) -> None:
        if add:
            scratch = self._pool.take(dst.shape.as_tuple(), False)
            fill(enc, scratch, value)
            add_into(enc, scratch, dst)
        else:
            fill(enc, dst, value)

    # -- submission --------------------------------------------------------------------------------------------
    def submit(self) -> None:
        """Submit everything recorded (forward, backward, and what the caller added, e.g. an optimiser step)."""
        if self._recording:
            raise TapeError("submit() inside 'with tape:'")
        if self.encoder is None or self._submitted:
            raise TapeError("nothing to submit: record a step with 'with tape:' first")
        if self._outer_encoder is not None:
            raise TapeError("a child tape records into its parent's encoder; submit the parent")
        dev.submit(self.encoder)
        self._submitted = True

    def __repr__(self) -> str:
        return f"Tape({len(self.nodes)} calls, {self.pool_bytes / 2**20:.1f} MiB pooled)"


def _numel(t: spy.Tensor) -> int:
    # not numpy's prod, nor iteration over the Shape (slower: SlangPy's Shape iterates by indexing until
    # IndexError): this runs several times per recorded step
    return math.prod(t.shape.as_tuple())


def clear(encoder: spy.CommandEncoder, t: spy.Tensor) -> None:
    """Record ``t = 0``: a buffer clear when ``t`` is its whole buffer (pool arrays), else a fill dispatch."""
    if int(t.offset) == 0 and 4 * _numel(t) == int(t.storage.size):
        encoder.clear_buffer(t.storage)
        return
    fill(encoder, t, 0.0)


def fill(encoder: spy.CommandEncoder, t: spy.Tensor, value: float) -> None:
    """Record ``t = value`` (every element; contiguous float32) into ``encoder``: one dispatch."""
    launch(_FILL, encoder, i=grid_1d(_numel(t)), value=value, dst=flat(t))


def add_into(encoder: spy.CommandEncoder, src: spy.Tensor, dst: spy.Tensor) -> None:
    """Record ``dst += src`` (same element count, contiguous float32) into ``encoder``: one dispatch."""
    if _numel(src) != _numel(dst):
        raise ValueError(f"add_into: {_numel(src)} elements into {_numel(dst)}")
    launch(_ADD, encoder, i=grid_1d(_numel(dst)), src=flat(src), dst=flat(dst))


def copy_into(encoder: spy.CommandEncoder, src: spy.Tensor, dst: spy.Tensor) -> None:
    """Record ``dst = src`` (same element count, contiguous float32) into ``encoder``: a buffer copy."""
    if _numel(src) != _numel(dst):
        raise ValueError(f"copy_into: {_numel(src)} elements into {_numel(dst)}")
    encoder.copy_buffer(dst.storage, 4 * int(dst.offset), src.storage, 4 * int(src.offset), 4 * _numel(src))


def record(name: str, forward: Callable[[spy.CommandEncoder], None],
           backward: Callable[[spy.CommandEncoder, dict[int, spy.Tensor]], None] | None, **arrays: Any) -> None:
    """:meth:`Tape.record` on the recording tape; without one, ``forward`` runs now (its own submission)."""
    tape = current_tape()
    if tape is not None:
        tape.record(name, forward, backward, **arrays)
        return
    encoder = dev.create_command_encoder()
    forward(encoder)
    dev.submit(encoder)


def loss_scalar(loss: Any) -> float:
    """The value of an objective's loss (waits for the GPU): ``item()`` of a loss value, the sum of an array's
    elements, the sum over a list. (Here, below nn and train, so that both read a loss the same way.)"""
    if isinstance(loss, (list, tuple)):
        return float(sum(loss_scalar(item) for item in loss))
    if isinstance(loss, spy.Tensor):
        return float(np.sum(loss.to_numpy().astype(np.float64)))
    return float(loss.item())
