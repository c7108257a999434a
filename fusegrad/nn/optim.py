"""Optimizers with tinygrad's API: SGD, LARS, LAMB, Adam, AdamW, Muon and OptimizerGroup.

Every optimizer builds its update lazily: ``schedule_step()`` assigns the new values into the
parameters (and into its own state, like momentum buffers) and returns the tensors to realize;
``step()`` realizes them all at once, so the whole update fuses into a few kernels.

>>> from fusegrad import Tensor
>>> from fusegrad.nn.optim import SGD
>>> w = Tensor([1.0, 2.0], requires_grad=True)
>>> opt = SGD([w], lr=0.5)
>>> with Tensor.train():
...     opt.zero_grad()
...     _ = (w * w).sum().backward()
...     _ = opt.step()
>>> w.tolist()
[0.0, 0.0]
"""
from __future__ import annotations
from fusegrad.tensor import Tensor
from fusegrad.dtype import dtypes, least_upper_dtype, to_dtype
from fusegrad.helpers import dedup, flatten, getenv
from fusegrad.uop.ops import UOp, Ops, GroupOp

def _check_training() -> None:
    """RuntimeError (tinygrad's) unless training mode is on: outside it, a step would update the params with
    gradients of a graph built for inference (and BatchNorm's running statistics would not have moved)."""
    if not Tensor.training:
        raise RuntimeError(f"Tensor.training={Tensor.training}, Tensor.training must be enabled to use the optimizer.\n"
                           "  - help: Consider setting Tensor.training=True (or `with Tensor.train():`) before calling Optimizer.step().")

def _stored(t: Tensor) -> Tensor:
    """``t`` computed once into its own buffer when it is used by several state updates (the
    scheduler would otherwise recompute an unrealized gradient, a reduce, in each of them)."""
    return t if t.uop.base.op is Ops.BUFFER or t.uop.op is Ops.CONTIGUOUS else t.contiguous()

def _check_hyperparameters(**values: float) -> None:
    """ValueError (like tinygrad's and PyTorch's) for a negative lr, momentum, weight_decay or eps, or a
    beta outside [0, 1): such an optimizer would silently diverge."""
    for name, value in values.items():
        if not isinstance(value, (int, float)): continue   # a Tensor lr is the caller's business
        if name.startswith("b") and not 0.0 <= value < 1.0: raise ValueError(f"invalid {name}={value}: a beta must be in [0, 1)")
        if value < 0: raise ValueError(f"invalid {name}={value}: it must be non-negative")

def _new_state(initial: Tensor) -> Tensor:
    """An optimizer state tensor in a buffer of its own. Lazy on one device (constructing an optimizer runs no
    kernel, as in tinygrad); realized now when sharded over several devices, where the scheduler can't yet order a
    first step's assigns to a state buffer that is still being created (it reports a cycle)."""
    state = initial.contiguous()
    return state.realize() if isinstance(state.device, tuple) else state

class Optimizer:
    """Base class. ``params`` are deduplicated; as in tinygrad 0.14, those with ``is_param`` (in fusegrad:
    ``requires_grad`` not False) are updated and the others (``is_param_(False)``, ``requires_grad=False``) are kept
    as ``buffers`` (realized with each step but not updated); a param whose ``requires_grad`` is None is switched
    to True. Nothing runs until ``step()``: construction and ``schedule_step()`` only build lazy tensors. ``lr`` is a float32 (at least) Tensor so it can be changed mid-training
    with ``opt.lr.assign(...)`` or by replacing it. ``fused`` (tinygrad's FUSE_OPTIM) is accepted for
    compatibility; the per-param updates already realize together in one schedule. ``device`` (default:
    the first param's) is where the learning rate and the optimizer state (momentum, moments) live.
    """
    def __init__(self, params: list[Tensor], lr: float, device: str | tuple | None = None, fused: bool = False):
        params = list(params)
        for x in params:
            if x.requires_grad is None: x.requires_grad = True
        self.params: list[Tensor] = dedup([x for x in params if x.is_param])
        if not self.params: raise ValueError("optimizer must have at least one param (is_param, requires_grad not False)")
        self.device = device if device is not None else self.params[0].device
        self.buffers: list[Tensor] = dedup([x for x in params if not x.is_param])
        # the learning rate is stored in at least float32 so a large lr doesn't overflow a half default_float
        lr_dtype = least_upper_dtype(dtypes.default_float, dtypes.float32)
        self.lr = Tensor(lr if getenv("CONST_LR") else [lr], requires_grad=False, device=self.device, dtype=lr_dtype)
        self.fused = fused

    def _new_optim_param(self) -> list[Tensor]:
        """A zero float32 (``OPTIM_DTYPE``) state tensor per param, in its own buffer once the first step runs
        (lazy, like tinygrad's: constructing an optimizer runs no kernel)."""
        dtype = to_dtype(getenv("OPTIM_DTYPE", "float32"))
        # a multi-device optimizer keeps each state tensor where its param is (sharded like it)
        def device_of(t: Tensor) -> str | tuple: return t.device if isinstance(self.device, tuple) else self.device
        return [_new_state(Tensor.zeros(*t.shape, dtype=dtype, device=device_of(t), requires_grad=False)) for t in self.params]

    def _on_state_device(self, x: Tensor) -> Tensor:
        """``x`` copied to a single-device optimizer's ``device`` (where its lr and state live); the new
        param values are copied back in ``_schedule_updates``."""
        return x.to(self.device) if isinstance(self.device, str) and x.device != self.device else x

    def zero_grad(self) -> None:
        """Forget the gradients (set ``.grad`` to None) of every param, so the next backward() starts
        a new sum instead of adding to the previous step's."""
        for param in self.params: param.grad = None

    def step(self) -> None:
        """Compute and apply the update now: ``Tensor.realize(*self.schedule_step())``."""
        Tensor.realize(*self.schedule_step())

    def schedule_step(self) -> list[Tensor]:
        """Assign the updated values (lazily) and return every tensor that must be realized. The
        scheduler runs every read of a param's old value before the assign that overwrites it."""
        _check_training()
        self._prepare()
        return self._schedule_updates()

    def _prepare(self) -> None:
        """Pick the gradients for this step."""
        for t in self.params:
            if t.grad is None: raise RuntimeError(f"param of shape {t.shape} has no .grad; call backward() before step()")
        self._grads = []
        for t in self.params:
            # the gradient is stored by this step, and
            # .grad then refers to that buffer: a .grad that backward() keeps accumulating into (no
            # zero_grad) would otherwise be a lazy sum whose graph grows with every step
            g = t.grad.contiguous()
            t.grad = g
            self._grads.append(g)

    def _schedule_updates(self) -> list[Tensor]:
        updated, extra = self._step(self.params, self._grads)
        del self._grads
        for t, new in zip(self.params, updated):
            if new.device != t.device: new = new.to(t.device)   # state on another ``device``
            t.assign(new if new.shape == t.shape else new.reshape(t.shape))
        return extra + self.params + self.buffers

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """The new value of each param, and the state tensors that must be realized with them."""
        raise NotImplementedError

class OptimizerGroup(Optimizer):
    """Several optimizers stepped together (their updates realize in one schedule).

    >>> from fusegrad import Tensor
    >>> a, b = Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)
    >>> opt = OptimizerGroup(SGD([a], lr=0.1), Adam([b]))
    >>> len(opt.params)
    2
    """
    def __init__(self, *optimizers: Optimizer):  # pylint: disable=super-init-not-called
        self.optimizers = optimizers
        self.params, self.buffers = flatten([o.params for o in optimizers]), flatten([o.buffers for o in optimizers])
    def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
    def zero_grad(self) -> None:
        for o in self.optimizers: o.zero_grad()
    def schedule_step(self) -> list[Tensor]:
        _check_training()
        for o in self.optimizers: o._prepare()
        return [x for o in self.optimizers for x in o._schedule_updates()]

def _newton_schulz(x: Tensor, steps: int, params: tuple, eps: float = 1.0e-7) -> Tensor:
    """Approximately orthogonalize a matrix (batch) with ``steps`` iterations of the odd polynomial
    ``sum_i params[i] * (X X^T)^i X``, after scaling X to unit Frobenius norm."""
    return x.newton_schulz(steps, params, eps)

class LARS(Optimizer):
    """SGD with momentum and a layer-wise trust ratio ``tcoef * |w| / (|g| + wd * |w|)`` (used when
    both norms are positive). ``classic`` momentum applies the learning rate before the momentum
    buffer; otherwise (PyTorch style) after. With ``ns_steps`` the update is orthogonalized by
    Newton-Schulz (that is Muon).

    >>> from fusegrad import Tensor
    >>> opt = LARS([Tensor([1.0, 2.0], requires_grad=True)], lr=0.1)
    >>> len(opt.b)
    1
    """
    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4, ns_steps: int = 0,
                 ns_params: tuple | None = None, nesterov: bool = False, classic: bool = True, pre_wd: bool = True, tcoef: float = 0.001,
                 device: str | tuple | None = None, fused: bool = False):
        _check_hyperparameters(lr=lr, momentum=momentum, weight_decay=weight_decay)
        super().__init__(params, lr, device, fused)
        self.momentum, self.wd, self.ns_steps, self.ns_params = momentum, weight_decay, ns_steps, ns_params
        self.nesterov, self.classic, self.pre_wd, self.tcoef = nesterov, classic, pre_wd, tcoef
        self.b = self._new_optim_param() if self.momentum else []
    @property
    def ns_coefficients(self) -> tuple | None:
        """tinygrad's name for ``ns_params``."""
        return self.ns_params

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        ret = []
        for i, (t, g) in enumerate(zip(params, grads)):
            t, g = self._on_state_device(t), self._on_state_device(g)
            # the gradient is read twice with a trust ratio or nesterov momentum: compute it once
            if self.tcoef != 0 or (self.momentum and self.nesterov): g = _stored(g)
            if self.tcoef != 0:
                r1 = t.detach().square().sum().sqrt()
                r2 = g.square().sum().sqrt()
                r: Tensor | float = (r1 > 0).where((r2 > 0).where(self.tcoef * r1 / (r2 + self.wd * r1), 1.0), 1.0)
            else: r = 1.0
            if self.pre_wd and self.wd > 0: g = g + self.wd * t.detach()
            # classic momentum applies the learning rate before the momentum buffer
            if self.classic: g = g * r * self.lr
            if self.momentum:
                # the buffer is zero on the first step, so no special case is needed
                self.b[i].assign(self.momentum * self.b[i] + g)
                g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
            if self.ns_steps: g = _newton_schulz(g.reshape(g.shape[0], -1), self.ns_steps, self.ns_params).reshape(g.shape)
            # popular (PyTorch) momentum applies it after
            if not self.classic: g = g * r * self.lr
            tt = t.detach()
            if not self.pre_wd and self.wd > 0: tt = tt * (1.0 - self.wd * self.lr)
            ret.append((tt - g).cast(t.dtype))
        return ret, self.b

def SGD(params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
        classic: bool = False, device: str | tuple | None = None, fused: bool = False) -> LARS:
    """Stochastic gradient descent (PyTorch's formulation unless ``classic``): LARS with trust
    coefficient 0.

    >>> from fusegrad import Tensor
    >>> opt = SGD([Tensor([1.0], requires_grad=True)], lr=0.1, momentum=0.9, nesterov=True)
    >>> opt.lr.item() > 0.09
    True
    """
    return LARS(params, lr, momentum, weight_decay, nesterov=nesterov, classic=classic, pre_wd=True, tcoef=0.0, device=device, fused=fused)

def Muon(params: list[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1, ns_steps: int = 5,
         ns_coefficients: tuple = (3.4445, -4.775, 2.0315), nesterov: bool = True, device: str | tuple | None = None,
         fused: bool = False) -> LARS:
    """SGD with momentum whose update is orthogonalized by ``ns_steps`` Newton-Schulz iterations
    (each param is viewed as a (shape[0], -1) matrix), with decoupled weight decay applied to the
    param as ``w * (1 - lr * wd)``.

    >>> from fusegrad import Tensor
    >>> opt = Muon([Tensor.ones(4, 4, requires_grad=True)])
    >>> opt.ns_steps
    5
    """
    if fused: raise ValueError("fused=True is not supported by the Muon optimizer (its Newton-Schulz step works on each "
                                           "param's own matrix, which a fused buffer of all params doesn't have)")
    return LARS(params, lr, momentum, weight_decay, ns_steps, ns_coefficients, nesterov, classic=False, pre_wd=False, tcoef=0.0, device=device)

class LAMB(Optimizer):
    """LAMB (Adam with a layer-wise trust ratio ``|w| / |update|``); with ``adam=True`` it is Adam
    with decoupled weight decay (AdamW). The moments ``m`` and ``v`` are float32 whatever the param
    dtype, and the running powers ``b1^t``, ``b2^t`` are tensors, so the whole step stays lazy.

    >>> from fusegrad import Tensor
    >>> opt = LAMB([Tensor([1.0, 2.0], requires_grad=True)])
    >>> opt.m[0].dtype
    dtypes.float
    """
    def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
                 weight_decay: float = 0.0, adam: bool = False, device: str | tuple | None = None, fused: bool = False):
        _check_hyperparameters(lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
        super().__init__(params, lr, device, fused)
        self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
        self.b1_t, self.b2_t = (_new_state(Tensor.ones((1,), dtype=dtypes.float32, device=self.device, requires_grad=False))
                                for _ in (b1, b2))
        self.m = self._new_optim_param()
        self.v = self._new_optim_param()

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        ret = []
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)
        for i, (t, g) in enumerate(zip(params, grads)):
            t, g = self._on_state_device(t), self._on_state_device(g)
            g = _stored(g).cast(self.m[i].dtype)
            self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * g)
            self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * (g * g))
            m_hat = self.m[i] / (1.0 - self.b1_t)
            v_hat = self.v[i] / (1.0 - self.b2_t)
            up = m_hat / (v_hat.sqrt() + self.eps) + self.wd * t.detach().cast(m_hat.dtype)
            if not self.adam:
                r1 = t.detach().cast(up.dtype).square().sum().sqrt()
                r2 = up.square().sum().sqrt()
                r: Tensor | float = (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
            else: r = 1.0
            ret.append((t.detach() - self.lr * r * up).cast(t.dtype))
        return ret, [self.b1_t, self.b2_t] + self.m + self.v

def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, device: str | tuple | None = None,
         fused: bool = False) -> LAMB:
    """Adam: LAMB with ``adam=True`` and no weight decay.

    >>> from fusegrad import Tensor
    >>> Adam([Tensor([1.0], requires_grad=True)]).eps
    1e-08
    """
    return LAMB(params, lr, b1, b2, eps, 0.0, adam=True, device=device, fused=fused)

def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01,
          device: str | tuple | None = None, fused: bool = False) -> LAMB:
    """AdamW: Adam with decoupled weight decay (``w -= lr * wd * w`` alongside the Adam step).

    >>> from fusegrad import Tensor
    >>> AdamW([Tensor([1.0], requires_grad=True)]).wd
    0.01
    """
    return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, device=device, fused=fused)
