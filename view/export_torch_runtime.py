

# ---- apply_plan: the plan applied to your nn.Module (docs/torch.md) --------------------------
# Tested with torch 2.13 (CPU, gloo).  What torch cannot hold as carve does is refused, one line
# naming the value and its placement (refusals()); nothing is approximated.


class PlanError(ValueError):
    """A module that is not the plan's model, or a placement torch cannot express."""


def _pl_text(placements):
    def one(p):
        if isinstance(p, Shard):
            return "Shard(%d)" % p.dim
        return "Replicate()" if isinstance(p, Replicate) else "Partial()"
    return "[" + ", ".join(one(p) for p in placements) + "]"


def _shards(placements):
    """{tensor dim: number of blocks} of a placement list on this plan's mesh."""
    out = {}
    for axis, p in enumerate(placements):
        if isinstance(p, Shard):
            out[p.dim] = out.get(p.dim, 1) * MESH_SHAPE[axis]
    return out


def refusals():
    """What torch cannot hold as this plan does, one line per value (an empty list: nothing)."""
    out = []
    for role, table in (("param", PARAM_PLACEMENTS), ("input", INPUT_PLACEMENTS)):
        for name, pl in table.items():
            if name in VIEWS:
                out.append("%s '%s': %s of its view %s splits a factor of a dim of the module's %s: no DTensor "
                           "placement of the module's tensor holds carve's blocks" % (role, name, _pl_text(pl), VIEWS[name], SHAPES[name]))
                continue
            for d, n in sorted(_shards(pl).items()):
                if SHAPES[name][d] % n:
                    out.append("%s '%s': %s splits dim %d (%d) into %d blocks unevenly: carve pads it, DTensor "
                               "would cut it as torch.chunk does" % (role, name, _pl_text(pl), d, SHAPES[name][d], n))
            if name in MINOR_FIRST:
                out.append("%s '%s': %s: carve splits a dim over several mesh axes minor axis first, DTensor in "
                           "mesh order (each block would sit on another device)" % (role, name, _pl_text(pl)))
    for name, pl in OPT_STATE_PLACEMENTS.items():
        of = OPT_STATE_OF.get(name)
        if of is not None and list(pl) != list(PARAM_PLACEMENTS[of]):
            out.append("optimizer state '%s': %s, its param '%s' %s: torch.optim keeps each state placed like its "
                       "param (ZeRO-1/2 need a sharded optimizer)" % (name, _pl_text(pl), of, _pl_text(PARAM_PLACEMENTS[of])))
    return out


def _refuse_any():
    bad = refusals()
    if bad:
        more = " (%d more: refusals() lists them)" % (len(bad) - 1) if len(bad) > 1 else ""
        raise PlanError("carve plan: %s%s" % (bad[0], more))


def _module_params(model):
    """{name: (param, [(module, leaf), ...])}: each param once by its first state_dict name, with every
    module attribute holding it (a tied weight has several)."""
    out, first = {}, {}
    for mname, mod in model.named_modules(remove_duplicate=False):
        for leaf, p in mod._parameters.items():
            if p is None:
                continue
            name = (mname + "." if mname else "") + leaf
            key = first.setdefault(id(p), name)
            out.setdefault(key, (p, []))[1].append((mod, leaf))
    return out


def _check_module(params, mesh):
    if tuple(mesh.mesh.shape) != tuple(MESH_SHAPE) or tuple(mesh.mesh_dim_names or ()) != tuple(MESH_AXES):
        raise PlanError("carve plan: the mesh is %s %s, the plan's %s %s" % (tuple(mesh.mesh_dim_names or ()), tuple(mesh.mesh.shape),
                                                                        MESH_AXES, MESH_SHAPE))
    for name in params:
        if name not in PARAM_PLACEMENTS:
            raise PlanError("carve plan: param '%s' of the module is not in the plan (a module of another model?)" % name)
    for name in PARAM_PLACEMENTS:
        if name not in params:
            raise PlanError("carve plan: param '%s' of the plan is not in the module (a module of another model?)" % name)
        if tuple(params[name][0].shape) != tuple(SHAPES[name]):
            raise PlanError("carve plan: param '%s' is %s in the module, %s in the plan" % (name, tuple(params[name][0].shape),
                                                                                           tuple(SHAPES[name])))


class _LossOps:
    """DTensor's loss-parallel cross-entropy (torch.distributed.tensor.parallel.loss_parallel) where the
    logits are split on the class dim, as carve's vocabulary-parallel head is; DTensor's own rules
    elsewhere.  install() turns it on for the process, with DTensor's implicit replication (the plain
    tensors a module makes in its forward, masks and positions, count as replicated): both must hold
    in the backward too, which runs with the thread state of the backward() call."""

    installed = False

    @classmethod
    def install(cls):
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor.parallel import loss as _loss
        DTensor._op_dispatcher._allow_implicit_replication = True
        if cls.installed:
            return
        self = cls()
        self.table = DTensor._op_dispatcher._custom_op_handlers
        self.table.update({op: self._wrap(op, h) for op, h in _loss.customized_loss_ops.items()})
        cls.installed = True

    def _wrap(self, op, handler):
        name = str(op)
        logits_arg = 1 if "backward" in name else 0
        nll = "nll_loss" in name

        def run(op_call, args, kwargs):
            x = args[logits_arg]
            if nll:
                dim = 1 if x.dim() >= 2 else 0
            else:
                dim = args[1 if logits_arg == 0 else 2] % x.dim()
            if not any(isinstance(p, Shard) and p.dim == dim for p in x.placements):
                mine = self.table.pop(op_call)
                try:
                    return op_call(*args, **kwargs)
                finally:
                    self.table[op_call] = mine
            if nll and logits_arg == 0 and args[3] == 1 and x.device_mesh.ndim > 1:
                return self._mean(handler, op_call, args, kwargs)
            return handler(op_call, args, kwargs)
        return run

    @staticmethod
    def _mean(handler, op_call, args, kwargs):
        """nll_loss's mean on a mesh of several dims (loss_parallel has only the sum there): the sum
        over the global batch over its count, which the plan's shapes fix (no collective)."""
        import torch
        from torch.distributed.tensor import DTensor
        x, target, weight, _, ignore = args
        local = target.to_local() if isinstance(target, DTensor) else target
        if weight is not None or bool((local == ignore).any()):
            raise PlanError("carve plan: cross_entropy with class weights or ignore_index targets over vocabulary-split "
                            "logits on a mesh of %d dims: the mean's count is not the batch's" % x.device_mesh.ndim)
        out, total = handler(op_call, (x, target, None, 2, ignore), kwargs)
        count = float(target.numel())
        return out / count, torch.full_like(total, count)


def _grad_as(x, placements):
    """x, whose gradient is placed as `placements` where it flows back through here: carve's program
    resolves a module output's gradient in that output's layout (the backward's all-reduce of a
    column-parallel input's gradient sits here, not where DTensor would choose)."""
    import torch

    class GradAs(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.view_as(t)

        @staticmethod
        def backward(ctx, grad):
            return _place_grad(grad, placements)
    return GradAs.apply(x)


def _place_grad(grad, placements):
    return _redistribute(grad, placements)


def _redistribute(x, placements):
    """x placed as `placements`, first taking locally the blocks it will keep (a replicated mesh dim the
    target shards), so the reductions move blocks, not whole tensors (DTensor would all-reduce a
    partial-and-replicated value whole before slicing it)."""
    from torch.distributed.tensor import Replicate, Shard
    now = tuple(x.placements)
    if now == tuple(placements):
        return x
    first = tuple(t if isinstance(t, Shard) and isinstance(c, Replicate) else c for c, t in zip(now, placements))
    if first != now:
        x = x.redistribute(x.device_mesh, first)
    return x.redistribute(x.device_mesh, placements)


_MESH = []  # the mesh apply_plan placed the module on (constrain's)


def constrain(x, name):
    """x placed as the plan places its value `name` (ACTIVATION_PLACEMENTS), and its gradient where it
    flows back through here: for a module's own values that are no module's output (as JAX's
    with_sharding_constraint).  x unchanged where x is no DTensor or the plan has no such value."""
    from torch.distributed.tensor import DTensor, Partial
    placements = ACTIVATION_PLACEMENTS.get(name)
    if not isinstance(x, DTensor) or placements is None or any(isinstance(p, Partial) for p in placements):
        return x
    return _grad_as(_redistribute(x, placements), placements)


class _Placed:
    """The hooks that make the module run the plan's step (apply_plan installs them)."""

    def __init__(self, model, mesh, placed, homes):
        import torch
        self.torch = torch
        self.mesh, self.placed, self.homes = mesh, placed, homes
        self.gathered = {}
        self.sig = inspect.signature(model.forward)
        model.register_forward_pre_hook(self.before, with_kwargs=True, prepend=True)
        by_module = {}
        for name in COMPUTE_PLACEMENTS:
            for mod, leaf in homes[name]:
                by_module.setdefault(id(mod), (mod, []))[1].append((leaf, name))
        for mod, leaves in by_module.values():
            mod.register_forward_pre_hook(self._gather(leaves))
            mod.register_forward_hook(self._restore(leaves))
        self.pinned = []
        for path, act in MODULE_OUTPUTS.items():
            try:
                mod = model.get_submodule(path)
            except AttributeError:
                continue
            mod.register_forward_hook(self._place(act))
            self.pinned.append(path)
        for name, p in placed.items():
            if p.requires_grad and name not in COMPUTE_PLACEMENTS:
                p.register_post_accumulate_grad_hook(self._resolve_grad)

    def before(self, model, args, kwargs):
        from torch.distributed.tensor import DTensor, distribute_tensor
        self.gathered.clear()
        bound = self.sig.bind(*args, **kwargs)
        for name, t in bound.arguments.items():
            if name in INPUT_PLACEMENTS and isinstance(t, self.torch.Tensor) and not isinstance(t, DTensor):
                if tuple(t.shape) != tuple(SHAPES[name]):
                    raise PlanError("carve plan: input '%s' is %s, the plan's %s" % (name, tuple(t.shape), tuple(SHAPES[name])))
                bound.arguments[name] = distribute_tensor(t, self.mesh, INPUT_PLACEMENTS[name], src_data_rank=None)
        return bound.args, bound.kwargs

    def _gather(self, leaves):
        def gather_params(mod, args):
            for leaf, name in leaves:
                if name not in self.gathered:
                    self.gathered[name] = self.placed[name].redistribute(self.mesh, COMPUTE_PLACEMENTS[name])
                mod._parameters[leaf] = self.gathered[name]
        return gather_params

    def _restore(self, leaves):
        def hook(mod, args, out):
            for leaf, name in leaves:
                mod._parameters[leaf] = self.placed[name]
        return hook

    @staticmethod
    def _place(name):
        def place_output(mod, args, out):
            return constrain(out, name)
        return place_output

    @staticmethod
    def _resolve_grad(p):
        if p.grad is not None and tuple(p.grad.placements) != tuple(p.placements):
            p.grad = _redistribute(p.grad, p.placements)


def apply_plan(model, mesh=None):
    """Distributes `model` (the nn.Module the plan's model was exported from, or written like it) as
    this plan says and returns it: every param a DTensor placed by its state_dict name
    (PARAM_PLACEMENTS); a param the plan gathers before use (ZeRO-3) is stored in its blocks and
    gathered in the forward (COMPUTE_PLACEMENTS), its gradient reduce-scattered back; the inputs
    placed as INPUT_PLACEMENTS when forward is called with whole tensors (every rank the same
    batch); each block's output placed as the plan fixes it (MODULE_OUTPUTS: each block's and each module's the plan names); each gradient resolved
    to its param's placement as soon as it is made.  The forward returns a DTensor loss.
    mesh: make_mesh("cpu") or make_mesh("cuda") (default: cuda where there is one).
    Raises PlanError (one line) for a module that is not the plan's or a plan torch cannot hold."""
    import torch
    from torch.distributed.tensor import distribute_tensor
    if PIPELINE:
        raise PlanError("carve plan: a pipelined plan (over '%s'): use apply_pipeline" % PIPELINE["axis"])
    _refuse_any()
    if mesh is None:
        mesh = make_mesh("cuda" if torch.cuda.is_available() else "cpu")
    params = _module_params(model)
    _check_module(params, mesh)
    placed = {}
    for name, (p, homes) in params.items():
        d = distribute_tensor(p.detach(), mesh, PARAM_PLACEMENTS[name], src_data_rank=None)
        placed[name] = torch.nn.Parameter(d, requires_grad=p.requires_grad)
        for mod, leaf in homes:
            mod._parameters[leaf] = placed[name]
    _LossOps.install()
    model._carve_plan = _Placed(model, mesh, placed, {n: h for n, (_, h) in params.items()})
    return model
