

# ---- apply_plan: the plan applied to your nn.Module (docs/torch.md) --------------------------
# Tested with torch 2.13 (CPU, gloo).  What torch cannot hold as carve does is refused, one line
# naming the value and its placement (refusals()); nothing is approximated.


class PlanError(ValueError):
    """A module that is not the plan's model, or a placement torch cannot express."""


def _split(p):
    """Whether placement p splits a dim: Shard, or _StridedShard (carve's split of a dim over several
    mesh dims minor dim first: this mesh dim's blocks inside the later mesh dims' blocks)."""
    return isinstance(p, (Shard, _StridedShard))


def _pl_text(placements):
    def one(p):
        if isinstance(p, _StridedShard):
            return "_StridedShard(%d, split_factor=%d)" % (p.dim, p.split_factor)
        if isinstance(p, Shard):
            return "Shard(%d)" % p.dim
        return "Replicate()" if isinstance(p, Replicate) else "Partial()"
    return "[" + ", ".join(one(p) for p in placements) + "]"


def _shards(placements):
    """{tensor dim: number of blocks} of a placement list on this plan's mesh."""
    out = {}
    for axis, p in enumerate(placements):
        if _split(p):
            out[p.dim] = out.get(p.dim, 1) * MESH_SHAPE[axis]
    return out


def _view_groups(view, shape):
    """The view's dims grouped by the dim of `shape` each refines ([[0], [1, 2, 3]] for (16, 3, 2, 8)
    of (16, 48)), or None where the view is no refinement of shape."""
    out, d = [], 0
    for n in shape:
        group, p = [], 1
        while d < len(view) and (p < n or (not group and n == 1)):
            p, d = p * view[d], d + 1
            group.append(d - 1)
        if p != n:
            return None
        out.append(group)
    return out if d == len(view) else None


def _parts_placeable(name, placements):
    """Whether a fused projection's param `name` (FUSED) held on its view as `placements` runs as its
    parts with DTensors: the parts' dim unsplit and first of its group, and in each part every split dim
    the major factor of its group, split evenly (the part flattened keeps carve's blocks as a Shard)."""
    view, d = VIEWS[name], FUSED[name]
    groups = _view_groups(view, SHAPES[name])
    shards = _shards(placements)
    if groups is None or d in shards or not any(g[0] == d for g in groups):
        return False
    for g in groups:
        rest = [i for i in g if i != d]
        split = [i for i in rest if i in shards]
        if split and (split != rest[:1] or view[split[0]] % shards[split[0]]):
            return False
    return True


def refusals():
    """What torch cannot hold as this plan does, one line per value (an empty list: nothing)."""
    out = []
    for role, table in (("param", PARAM_PLACEMENTS), ("input", INPUT_PLACEMENTS)):
        for name, pl in table.items():
            fused = role == "param" and name in FUSED  # held on its view, computed as its parts
            if name in VIEWS and not fused:
                out.append("%s '%s': %s of its view %s splits a factor of a dim of the module's %s: no DTensor "
                           "placement of the module's tensor holds carve's blocks" % (role, name, _pl_text(pl), VIEWS[name], SHAPES[name]))
                continue
            compute = COMPUTE_PLACEMENTS.get(name, pl)
            if fused and not _parts_placeable(name, compute):
                out.append("param '%s': %s of its view %s: a fused projection's part computed with it would split a "
                           "factor of a dim of the part (no DTensor placement holds carve's blocks)" % (name, _pl_text(compute), VIEWS[name]))
                continue
            shape = VIEWS[name] if fused else SHAPES[name]
            for d, n in sorted(_shards(pl).items()):
                if shape[d] % n:
                    out.append("%s '%s': %s splits dim %d (%d) into %d blocks unevenly: carve pads it, DTensor "
                               "would cut it as torch.chunk does" % (role, name, _pl_text(pl), d, shape[d], n))
            if name in MINOR_FIRST and not STRIDED_SHARD:
                out.append("%s '%s': %s: carve splits a dim over several mesh axes minor axis first, and this torch's "
                           "DTensor has no _StridedShard (torch 2.13 has)" % (role, name, _pl_text(pl)))
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


def _target_count(target, pick):
    """How many of the targets `pick` takes, over the whole batch: counted in each rank's block and
    summed over the mesh dims the targets are split on (one all-reduce of a scalar)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    if not isinstance(target, DTensor):
        return pick(target).sum()
    count = pick(target.to_local()).sum()
    mesh = target.device_mesh
    dims = [i for i, p in enumerate(target.placements) if _split(p)]
    if dims:
        names = tuple(mesh.mesh_dim_names[i] for i in dims)
        dist.all_reduce(count, group=mesh[names]._flatten().get_group() if len(dims) > 1 else mesh.get_group(dims[0]))
    return count


def _split_targets(target, x, ignore):
    """Whether nll_loss's mean needs carve's sum-then-count: its logits split on the class dim of a
    mesh of several dims (loss_parallel has only the sum there), or ignore_index targets in a batch
    split over some mesh dim (DTensor's own rule averages the blocks' means).  The same answer on
    every rank (a scalar all-reduce where the targets are split)."""
    from torch.distributed.tensor import DTensor
    dim = 1 if x.dim() >= 2 else 0
    if x.device_mesh.ndim > 1 and any(_split(p) and p.dim == dim for p in x.placements):
        return True
    split = isinstance(target, DTensor) and any(_split(p) for p in target.placements)
    return split and int(_target_count(target, lambda t: t == ignore)) > 0


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
            split = any(_split(p) and p.dim == dim for p in x.placements)
            if nll and logits_arg == 0 and args[3] == 1 and _split_targets(args[1], x, args[4]):
                return self._mean(handler if split else self._default(op_call), op_call, args, kwargs)
            return handler(op_call, args, kwargs) if split else self._default(op_call)(op_call, args, kwargs)
        return run

    def _default(self, op):
        """DTensor's own rule for op (this handler out of the table while it runs)."""
        def call(op_call, args, kwargs):
            mine = self.table.pop(op_call)
            try:
                return op_call(*args, **kwargs)
            finally:
                self.table[op_call] = mine
        return call

    @staticmethod
    def _mean(handler, op_call, args, kwargs):
        """nll_loss's mean where its targets are split (loss_parallel has only the sum on a mesh of
        several dims; DTensor's own rule averages the blocks' means, which is not the mean where
        ignore_index targets fall unevenly, as a shifted LM loss's do): the sum over the count of
        targets that are not ignore_index, that count summed over the mesh dims the targets are
        split on (one all-reduce of a scalar, as carve's step reduces the mean's count)."""
        import torch
        from torch.distributed.tensor import DTensor
        x, target, weight, _, ignore = args
        if weight is not None:
            raise PlanError("carve plan: cross_entropy with class weights over vocabulary-split logits on a mesh of "
                            "%d dims: not expressed" % x.device_mesh.ndim)
        out, total = handler(op_call, (x, target, None, 2, ignore), kwargs)
        count = _target_count(target, lambda t: t != ignore).to(out.dtype)
        if isinstance(total, DTensor):  # the count as the backward reads it: one value, replicated
            total = DTensor.from_local(count.reshape(total.to_local().shape), total.device_mesh,
                                       [Replicate()] * total.device_mesh.ndim, run_check=False)
        else:
            total = torch.full_like(total, float(count))
        return out / count, total

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


def _resolve(grad, placements):
    """A gradient (no autograd) placed as `placements`; a sum partial over several mesh dims is
    reduced by one all-reduce over them together, as carve's program does (DTensor would reduce
    over one mesh dim after the other: twice the collectives and the bytes)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Partial
    mesh = grad.device_mesh
    dims = [i for i, (c, t) in enumerate(zip(grad.placements, placements))
            if isinstance(c, Partial) and c.reduce_op == "sum" and not isinstance(t, Partial)]
    if len(dims) >= 2:
        first = tuple(t if _split(t) and isinstance(c, Replicate) else c for c, t in zip(grad.placements, placements))
        if first != tuple(grad.placements):
            grad = grad.redistribute(mesh, first)
        names = tuple(mesh.mesh_dim_names[i] for i in dims)
        local = grad.to_local().clone()
        dist.all_reduce(local, group=mesh[names]._flatten().get_group())
        now = [Replicate() if i in dims else p for i, p in enumerate(grad.placements)]
        grad = DTensor.from_local(local, mesh, now, run_check=False)
    return _redistribute(grad, placements)


def _redistribute(x, placements):
    """x placed as `placements`, first taking locally the blocks it will keep (a replicated mesh dim the
    target shards), so the reductions move blocks, not whole tensors (DTensor would all-reduce a
    partial-and-replicated value whole before slicing it); a value partial over several mesh dims is
    reduce-scattered over those the target shards before the others are all-reduced (the block, not
    the whole value: carve's program orders them so)."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    now = tuple(x.placements)
    if now == tuple(placements):
        return x
    first = tuple(t if _split(t) and isinstance(c, Replicate) else c for c, t in zip(now, placements))
    if first != now:
        x = x.redistribute(x.device_mesh, first)
    partial = [i for i, c in enumerate(first) if isinstance(c, Partial)]
    if len(partial) >= 2:
        scatter = tuple(t if i in partial and _split(t) else c for i, (c, t) in enumerate(zip(first, placements)))
        if scatter != first and scatter != tuple(placements):
            x = x.redistribute(x.device_mesh, scatter)
    return x.redistribute(x.device_mesh, placements)


_MESH = []  # the mesh apply_plan placed the module on (constrain's)


def constrain(x, name, drop_axis=None):
    """x placed as the plan places its value `name` (ACTIVATION_PLACEMENTS), and its gradient where it
    flows back through here: for a module's own values that are no module's output (as JAX's
    with_sharding_constraint).  x unchanged where x is no DTensor or the plan has no such value.
    drop_axis: the pipeline's axis (a stage's mesh has the others)."""
    from torch.distributed.tensor import DTensor, Partial
    placements = ACTIVATION_PLACEMENTS.get(name)
    if placements is not None and drop_axis is not None:
        placements = _drop(placements, drop_axis)
    if not isinstance(x, DTensor) or placements is None or any(isinstance(p, Partial) for p in placements):
        return x
    return _grad_as(_redistribute(x, placements), placements)


def read(x, name):
    """x placed as the plan's first forward reader of the value `name` computes with it
    (READ_PLACEMENTS), its gradient brought back to x's placement (_redistribute: a partial sum
    reduce-scattered onto the block x keeps, then all-reduced over the other mesh dims, as carve's
    program does; DTensor's own backward of the move would choose its order).  For the reads that no
    module boundary marks (apply_plan's hooks place module inputs and outputs): a module calls it where
    it reads a named value (carve's presets as torch modules, tests/torch_models.py).  x unchanged where
    x is no DTensor or the plan reads `name` as it holds it."""
    import torch
    from torch.distributed.tensor import DTensor
    placements = READ_PLACEMENTS.get(name)
    if not isinstance(x, DTensor) or placements is None or tuple(x.placements) == tuple(placements):
        return x
    own = tuple(x.placements)

    class Read(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return _redistribute(t, placements)

        @staticmethod
        def backward(ctx, grad):
            return _redistribute(grad, own)
    return Read.apply(x)


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
        self.inputs = {}  # this step's redistributed module inputs, by the input (two modules may share one)
        for path, (value, shape, placements) in MODULE_INPUTS.items():
            try:
                mod = model.get_submodule(path)
            except AttributeError:
                continue
            mod.register_forward_pre_hook(self._place_in(tuple(shape), placements))
        for name, p in placed.items():
            if p.requires_grad and name not in COMPUTE_PLACEMENTS:
                p.register_post_accumulate_grad_hook(self._resolve_grad)

    def before(self, model, args, kwargs):
        self.gathered.clear()
        self.inputs.clear()
        if any(p.kind == p.VAR_POSITIONAL for p in self.sig.parameters.values()) and not kwargs:
            # forward(*args): the plan's inputs in their order
            return tuple(self._place_input(n, t) for n, t in zip(list(INPUT_PLACEMENTS) + [None] * len(args), args)), {}
        bound = self.sig.bind(*args, **kwargs)
        for name, t in bound.arguments.items():
            bound.arguments[name] = self._place_input(name, t)
        return bound.args, bound.kwargs

    def _place_input(self, name, t):
        """t placed as the plan's input `name` (a whole tensor, every rank the same), else t."""
        from torch.distributed.tensor import DTensor, distribute_tensor
        if name not in INPUT_PLACEMENTS or not isinstance(t, self.torch.Tensor) or isinstance(t, DTensor):
            return t
        if tuple(t.shape) != tuple(SHAPES[name]):
            raise PlanError("carve plan: input '%s' is %s, the plan's %s" % (name, tuple(t.shape), tuple(SHAPES[name])))
        return distribute_tensor(t, self.mesh, INPUT_PLACEMENTS[name], src_data_rank=None)

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

    def _place_in(self, shape, placements):
        """A module's input placed as the plan computes the module with it (MODULE_INPUTS): where carve
        gathers a module's input, torch gathers it there too (not the module's output or its weight).
        Its gradient is DTensor's (the gather's backward, as carve's program reduces or slices it)."""
        from torch.distributed.tensor import DTensor

        def place_input(mod, args):
            x = args[0] if args else None
            if not isinstance(x, DTensor) or tuple(x.shape) != shape:
                return None
            hit = self.inputs.get(id(x))
            if hit is None or hit[0] is not x or hit[1] != placements:
                hit = self.inputs[id(x)] = (x, placements, _redistribute(x, placements))
            return (hit[2],) + tuple(args[1:])
        return place_input

    @staticmethod
    def _place(name):
        def place_output(mod, args, out):
            return constrain(out, name)
        return place_output

    @staticmethod
    def _place_on(name, axis):
        """_place on a stage's mesh: the plan's placements without the pipeline axis's."""
        def place_output(mod, args, out):
            return constrain(out, name, axis)
        return place_output

    @staticmethod
    def _resolve_grad(p):
        if p.grad is not None and tuple(p.grad.placements) != tuple(p.placements):
            p.grad = _resolve(p.grad, p.placements)


class _Parts:
    """The output of a fused projection run as its parts (FUSED): the k parts' results, each [..., N/k]
    placed as carve places it.  It stands for the module's [..., N] output where that output is cut into
    its parts (.split(N/k, dim=-1), .chunk(k, -1): the parts themselves) or viewed with the parts' dim
    ([..., k, ...]: the parts stacked); any other use is refused (it would need carve's blocks in one
    tensor, which no DTensor placement holds)."""

    def __init__(self, module, parts, width):
        self.module, self.parts, self.width = module, parts, width
        self.shape = tuple(parts[0].shape[:-1]) + (width,)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return len(self.shape)

    def _last(self, dim):
        return dim % len(self.shape) == len(self.shape) - 1

    def split(self, size, dim=0):
        if self._last(dim) and size == self.width // len(self.parts):
            return tuple(self.parts)
        return self._refuse(".split(%s, dim=%d)" % (size, dim))

    def chunk(self, n, dim=0):
        if self._last(dim) and n == len(self.parts):
            return tuple(self.parts)
        return self._refuse(".chunk(%d, dim=%d)" % (n, dim))

    def view(self, *shape):
        import torch
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        lead = len(self.shape) - 1
        if tuple(shape[:lead]) == self.shape[:lead] and len(shape) > lead and shape[lead] == len(self.parts):
            return torch.stack(self.parts, dim=lead).reshape(shape)
        return self._refuse(".view%s" % (shape,))

    reshape = view

    def _refuse(self, what):
        raise PlanError("carve plan: module '%s' runs as the parts of a fused projection (FUSED): its output's %s "
                        "needs its parts in one tensor, which no DTensor placement of carve's blocks holds" % (self.module, what))

    def __getattr__(self, name):
        return self._refuse("." + name)


def _run_as_parts(path, mod, weight, bias):
    """mod (an nn.Linear, or transformers' Conv1D: x @ W + b with W [in, out]) run as its fused parts:
    part i of its output from part i of its weight and bias (held on their views, FUSED), as carve's
    program computes them (onnx/fused.c); returns the parts as one _Parts."""
    import torch
    conv = type(mod).__name__ == "Conv1D"
    wd = FUSED[weight]
    k = VIEWS[weight][wd]

    def piece(t, name, i):
        if name in FUSED:
            return t.select(FUSED[name], i)
        return t.reshape(k, -1).select(0, i)

    def forward(x):
        w, b = mod._parameters["weight"], mod._parameters.get("bias")
        parts = []
        for i in range(k):
            wi = piece(w, weight, i)
            bi = None if b is None else piece(b, bias, i).reshape(-1)
            if conv:
                wi = wi.reshape(wi.shape[0], -1)
                y = torch.addmm(bi, x.reshape(-1, x.shape[-1]), wi) if bi is not None else x.reshape(-1, x.shape[-1]) @ wi
                parts.append(y.reshape(tuple(x.shape[:-1]) + (-1,)))
            else:
                parts.append(torch.nn.functional.linear(x, wi.reshape(-1, wi.shape[-1]), bi))
        return _Parts(path, parts, SHAPES[weight][1 if conv else 0])
    mod.forward = forward


def _fused_modules(model):
    """Each module holding a FUSED weight, run as its parts (_run_as_parts); PlanError for a module
    apply_plan has no rule for (only nn.Linear and transformers' Conv1D)."""
    import torch
    for path, mod in model.named_modules():
        prefix = path + "." if path else ""
        weight = prefix + "weight"
        if weight not in FUSED or mod._parameters.get("weight") is None:
            continue
        conv = type(mod).__name__ == "Conv1D"
        if not conv and not isinstance(mod, torch.nn.Linear):
            raise PlanError("carve plan: param '%s' is a fused projection's (FUSED) in a %s: apply_plan runs only "
                            "nn.Linear's and Conv1D's as their parts" % (weight, type(mod).__name__))
        out_dim = 1 if conv else 0
        if not any(g[0] == FUSED[weight] for g in [_view_groups(VIEWS[weight], SHAPES[weight])[out_dim]]):
            raise PlanError("carve plan: param '%s': the parts' dim %d of its view %s is not its output dim's first "
                            "factor" % (weight, FUSED[weight], VIEWS[weight]))
        _run_as_parts(path, mod, weight, prefix + "bias")


def apply_plan(model, mesh=None):
    """Distributes `model` (the nn.Module the plan's model was exported from, or written like it) as
    this plan says and returns it: every param a DTensor placed by its state_dict name
    (PARAM_PLACEMENTS); a param the plan gathers before use (ZeRO-3) is stored in its blocks and
    gathered in the forward (COMPUTE_PLACEMENTS), its gradient reduce-scattered back; the inputs
    placed as INPUT_PLACEMENTS when forward is called with whole tensors (every rank the same
    batch); each block's output placed as the plan fixes it (MODULE_OUTPUTS: each block's and each module's the plan names); each gradient resolved
    to its param's placement as soon as it is made.  A fused projection's weight and bias (FUSED:
    GPT-2's c_attn, held by carve as [C, 3, H, D]) are held on their views, and their module runs as
    its parts (_run_as_parts: part i from part i of the weight, as carve computes it), its output
    split into the parts.  The forward returns a DTensor loss.
    mesh: make_mesh("cpu") or make_mesh("cuda") (default: cuda where there is one).
    Raises PlanError (one line) for a module that is not the plan's or a plan torch cannot hold."""
    import torch
    from torch.distributed.tensor import distribute_tensor
    if PIPELINE:
        raise PlanError("carve plan: a pipelined plan (over '%s'): use apply_pipeline(model, batch, mesh)" % PIPELINE["axis"])
    _refuse_any()
    if mesh is None:
        mesh = make_mesh("cuda" if torch.cuda.is_available() else "cpu")
    params = _module_params(model)
    _check_module(params, mesh)
    placed = {}
    _fused_modules(model)
    for name, (p, homes) in params.items():
        # a fused projection's param is held on its view (FUSED), its module run as its parts
        t = p.detach().reshape(VIEWS[name]) if name in FUSED else p.detach()
        d = distribute_tensor(t, mesh, PARAM_PLACEMENTS[name], src_data_rank=None)
        placed[name] = torch.nn.Parameter(d, requires_grad=p.requires_grad)
        for mod, leaf in homes:
            mod._parameters[leaf] = placed[name]
    _LossOps.install()
    model._carve_plan = _Placed(model, mesh, placed, {n: h for n, (_, h) in params.items()})
    model._carve_plan.aliases = _aliases(model, placed)
    model.register_load_state_dict_pre_hook(_load_placed(model._carve_plan.aliases, mesh, lambda n: PARAM_PLACEMENTS[n]))
    return model


# ---- checkpoints: an ordinary state_dict into and out of a placed module ----------------------


def _aliases(model, placed):
    """{state_dict name: the plan's name} for every name under which the module holds a placed param
    (a tied weight has several: GPT-2's lm_head.weight is transformer.wte.weight)."""
    ids = {id(p): name for name, p in placed.items()}
    return {key: ids[id(p)] for key, p in model.named_parameters(remove_duplicate=False) if id(p) in ids}


def _load_placed(aliases, mesh, placements):
    """A load_state_dict pre-hook (apply_plan's; each stage's cut by hand): an ordinary checkpoint's
    tensor for a param the plan places (saved from the module before apply_plan, by one process, or by
    ordinary_state_dict: GPT-2's c_attn as the module's [C, 3C]) is reshaped to the view carve holds it
    on (FUSED) and cut to its placement, `placements(plan name)` on `mesh` (None: held whole), each rank
    keeping its block of the same file (no communication).  A DTensor (the placed module's own
    state_dict) loads as it is; a tensor of another shape is left to torch's size check; a tied weight
    saved under one of its names (a deduplicated checkpoint) loads under all of them."""
    by_name = {}
    for key, name in aliases.items():
        by_name.setdefault(name, []).append(key)

    def hook(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        from torch.distributed.tensor import DTensor, distribute_tensor
        for name, keys in by_name.items():
            there = [k for k in keys if prefix + k in state_dict]
            if not there:
                continue
            t = state_dict[prefix + there[0]]
            if not isinstance(t, DTensor) and tuple(t.shape) == tuple(SHAPES[name]):
                t = t.detach().reshape(VIEWS[name]) if name in FUSED else t.detach()
                if mesh is not None:
                    t = distribute_tensor(t, mesh, placements(name), src_data_rank=None)
            for k in keys:
                state_dict[prefix + k] = t
    return hook


def ordinary_state_dict(model):
    """The placed module's state_dict as the module had it before apply_plan: each placed param
    gathered whole (a collective per param: every rank calls this) in the module's own shape (a fused
    projection's view back to its [C, 3C]), every other entry as it is.  The module unplaced, one
    process, or apply_plan's module (model.load_state_dict: its load hook) load it."""
    plan = getattr(model, "_carve_plan", None)
    if plan is None:
        raise PlanError("carve plan: the module has no plan applied (apply_plan)")
    out = model.state_dict()
    whole = {}
    for key, name in plan.aliases.items():
        if key in out:
            if name not in whole:
                t = out[key]
                whole[name] = (t.full_tensor() if hasattr(t, "full_tensor") else t).reshape(SHAPES[name])
            out[key] = whole[name]
    return out


# ---- apply_pipeline: a pipelined plan on torch.distributed.pipelining ------------------------
_SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved": "ScheduleInterleaved1F1B"}


def _refuse_pipeline():
    if not PIPELINE:
        raise PlanError("carve plan: not pipelined: use apply_plan")
    if None in LAYER_MODULES:
        raise PlanError("carve plan: layer %d has no params to find its module by: the stages cannot be cut"
                        % LAYER_MODULES.index(None))
    if 0 in PIPELINE["layers"]:
        raise PlanError("carve plan: a virtual stage of no layers (split %s): torch's split points cannot make it"
                        % "/".join(map(str, PIPELINE["layers"])))
    _refuse_any()


def _drop(placements, axis):
    return [p for i, p in enumerate(placements) if i != axis]


def _place_stage_outputs(module, axis):
    """Every module output the plan names (MODULE_OUTPUTS) that the stage's module holds, placed as
    the plan places it on the stage's mesh (without the pipeline axis)."""
    for path, act in MODULE_OUTPUTS.items():
        try:
            module.get_submodule(path).register_forward_hook(_Placed._place_on(act, axis))
        except AttributeError:
            pass


class PipelineRun:
    """A pipelined plan applied (apply_pipeline): this rank's stages and the plan's schedule.

    step(**batch) runs one training step's forward and backward passes (the whole batch in the
    plan's micro-batches, the plan's schedule), resolves each gradient once (the data axes'
    reductions; a param two stages hold, GPT's tied wte, gets the sum of both stages' gradients)
    and returns the loss (on every rank); parameters() are this rank's, for the optimizer;
    full_params() gathers every param whole on every rank (a check, not for training)."""

    def __init__(self, stages, modules, schedule, mesh, axis, tied, feeds, names=None):
        self.stages, self.modules, self.schedule = stages, modules, schedule
        self.mesh, self.axis, self.tied, self.feeds = mesh, axis, tied, feeds
        self.names = names  # stages cut by hand: {id(param): its name in the plan}, only the stage's own

    def parameters(self):
        seen = set()
        for _, p in self.named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                yield p

    def named_parameters(self):
        for m in self.modules:
            for name, prm in m.named_parameters():
                if self.names is None:
                    yield name, prm
                elif id(prm) in self.names:  # a hand-cut stage's module keeps other stages' params
                    yield self.names[id(prm)], prm

    def step(self, **batch):
        import torch
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor
        group = self.mesh.get_group(self.axis)
        first = self.mesh.get_local_rank(self.axis) == 0
        losses = []
        m = PIPELINE["microbatches"]
        for feed in self.feeds:
            feed.chunks = iter(batch[feed.name].chunk(m))
        target = next(iter(batch.values()))  # loss_fn ignores it: the module returns its loss
        self.schedule.step(**(batch if first else {}), target=target, losses=losses, return_outputs=False)
        self._resolve_grads()
        self._sum_tied_grads()
        last = self.mesh.get_local_rank(self.axis) == self.mesh.size(self.axis) - 1
        loss = torch.zeros(())
        if last:
            loss = sum(x.detach().float() for x in losses) / len(losses)
        dist.broadcast(loss, group=group, group_src=self.mesh.size(self.axis) - 1)
        return loss

    def _resolve_grads(self):
        """Each gradient to its param's placement, once a step (the data axes' reductions)."""
        from torch.distributed.tensor import DTensor
        for _, p in self.named_parameters():
            if isinstance(p.grad, DTensor) and tuple(p.grad.placements) != tuple(p.placements):
                p.grad = _resolve(p.grad, p.placements)

    def _sum_tied_grads(self):
        """A param several stages hold gets the sum of their gradients on each (Megatron's way for a
        tied embedding), so every copy takes the same update."""
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor
        for name, p in self.named_parameters():
            if name in self.tied and p.grad is not None:
                dist.all_reduce(p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad, group=self.tied[name])

    def load_state_dict(self, state_dict):
        """Loads an ordinary checkpoint (the module's state_dict names and shapes: saved from the module
        before apply_pipeline, or by one process) into this rank's stages, each param placed as the
        plan places it (a load hook per stage, as apply_plan's).  Stages cut by hand only: a traced
        stage's params are renamed (load the checkpoint into the module before apply_pipeline).
        PlanError for a param of this rank's stages the checkpoint lacks."""
        if self.names is None:
            raise PlanError("carve plan: the stages were traced (torch's pipeline()): their params are renamed; "
                            "load the checkpoint into the module before apply_pipeline")
        for m in self.modules:
            own = _aliases(m, {self.names[id(p)]: p for p in m.parameters() if id(p) in self.names})
            found = {n for k, n in own.items() if k in state_dict}
            lacking = sorted(set(own.values()) - found)
            if lacking:
                raise PlanError("carve plan: the checkpoint has no '%s' (a param of this rank's stages)" % lacking[0])
            m.load_state_dict(state_dict, strict=False)

    def full_params(self):
        """Every param whole, gathered from the stages that hold it (on every rank)."""
        import torch.distributed as dist
        local = {}
        for name, p in self.named_parameters():
            t = p.detach()
            local[name] = (t.full_tensor() if hasattr(t, "full_tensor") else t).clone()
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, local)
        out = {}
        for d in every:
            for k, v in d.items():
                out.setdefault(k, v)
        return out


def _stage_io(gm, mesh, boundary_in, boundary_out):
    """gm's forward taking and giving plain tensors (what the pipeline's sends carry: each rank its
    block), as DTensors on the stage's mesh inside: an input by its name (INPUT_PLACEMENTS), an
    activation as the layer before the cut places it."""
    from torch.distributed.tensor import DTensor
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    out_names = [getattr(o, "name", None) for o in outs]
    inner = gm.forward

    def placed(name, boundary):
        return INPUT_PLACEMENTS[name] if name in INPUT_PLACEMENTS else boundary

    def forward(*args, **kwargs):
        # the schedule passes the first stage the batch by keyword (every input, even one it does
        # not read); the graph takes its own in its order
        args = list(args) + [kwargs[n] for n in names[len(args):]]
        for i, a in enumerate(args):
            if mesh is not None and hasattr(a, "dim") and not isinstance(a, DTensor):
                args[i] = DTensor.from_local(a, mesh, placed(names[i], boundary_in), run_check=False)
        out = inner(*args)
        single = not isinstance(out, (tuple, list))
        res = []
        for o, name in zip([out] if single else out, out_names):
            if isinstance(o, DTensor):
                o = _redistribute(o, placed(name, boundary_out) if o.dim() else [Replicate()] * o.device_mesh.ndim).to_local()
            res.append(o)
        return res[0] if single else type(out)(res)
    gm.forward = forward


class _Feed:
    """A model input that a stage after the first reads (the labels of a module that returns its
    loss): torch's stages take inputs only at the first stage, so the input is cut out of the split
    graph and this feeds the stage its micro-batches of it, in order, placed on the stage's mesh."""

    def __init__(self, name, mesh, placements):
        self.name, self.mesh, self.placements, self.chunks = name, mesh, placements, iter(())

    def peek(self):
        """The next micro-batch's input, left to be fed."""
        import itertools
        t = next(self.chunks)
        self.chunks = itertools.chain([t], self.chunks)
        return t

    def __call__(self):
        from torch.distributed.tensor import DTensor
        t = next(self.chunks)
        return t if self.mesh is None else DTensor.from_local(t, self.mesh, self.placements, run_check=False)


def _cut_root_inputs(pipe, mesh, axis):
    """Every later stage's model inputs, cut out of the split graph (the stage's call and its graph's
    placeholder), each replaced by a _Feed.  Returns {stage index: [feeds]}."""
    top = pipe.split_gm.graph
    calls = [n for n in top.nodes if n.op == "call_module"]
    roots = {n.name for n in top.nodes if n.op == "placeholder"}
    out = {}
    for idx, node in enumerate(calls):
        if idx == 0:
            continue
        gm = pipe.split_gm.get_submodule(node.target)
        holders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        keep = []
        for arg, ph in zip(node.args, holders):
            if getattr(arg, "name", None) not in roots:
                keep.append(arg)
                continue
            feed = _Feed(arg.name, mesh, _drop(INPUT_PLACEMENTS.get(arg.name, [Replicate()] * len(MESH_AXES)), axis))
            def fetch(feed=feed):
                return feed()
            fetch.__name__ = fetch.__qualname__ = "carve_feed_%s" % arg.name  # FX writes calls by name
            with gm.graph.inserting_before(ph):
                new = gm.graph.call_function(fetch, ())
            ph.replace_all_uses_with(new)
            gm.graph.erase_node(ph)
            out.setdefault(idx, []).append(feed)
        node.args = tuple(keep)
        gm.recompile()
    top.eliminate_dead_code()
    pipe.split_gm.recompile()
    return out


def apply_pipeline(model, batch, mesh=None):
    """Cuts `model` into the plan's stages (torch.distributed.pipelining.pipeline, split before the
    first layer module of each virtual stage: LAYER_MODULES, PIPELINE["layers"]), keeps this rank's
    (stage r and, interleaved, r + p, ...), places their params on the other mesh axes as
    apply_plan does, and returns a PipelineRun with the plan's schedule (PIPELINE["schedule"]:
    ScheduleGPipe, Schedule1F1B or ScheduleInterleaved1F1B over PIPELINE["microbatches"]).
    batch: one training batch as keyword arguments of model.forward (traced, one micro-batch).
    Raises PlanError (one line) for what torch cannot cut or hold as the plan does."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import SplitPoint, pipeline
    from torch.distributed.pipelining import schedules as _sched
    from torch.distributed.tensor import distribute_tensor
    _refuse_pipeline()
    if mesh is None:
        mesh = make_mesh("cuda" if torch.cuda.is_available() else "cpu")
    if _layer_list(model) is not None:
        return _apply_stages(model, batch, mesh)
    axis = list(MESH_AXES).index(PIPELINE["axis"])
    p, v, m = PIPELINE["stages"], PIPELINE["chunks"], PIPELINE["microbatches"]
    starts = [sum(PIPELINE["layers"][:k]) for k in range(1, p * v)]
    split = {LAYER_MODULES[s]: SplitPoint.BEGINNING for s in starts}
    micro = {k: t.chunk(m)[0] for k, t in batch.items()}
    pipe = pipeline(model, mb_args=(), mb_kwargs=micro, split_spec=split)
    rest = [a for i, a in enumerate(MESH_AXES) if i != axis]
    sub = mesh[tuple(rest)] if rest else None
    cut = _cut_root_inputs(pipe, sub, axis)
    rank = mesh.get_local_rank(axis)
    device = torch.device(mesh.device_type)
    _LossOps.install()
    stages, modules, feeds = [], [], []
    for k in range(v):
        idx = rank + k * p
        gm = pipe.get_stage_module(idx)
        params = _module_params(gm)
        for name, (prm, homes) in params.items():
            if name not in PARAM_PLACEMENTS:
                raise PlanError("carve plan: param '%s' of stage %d is not in the plan" % (name, idx))
            if sub is not None:
                d = distribute_tensor(prm.detach(), sub, _drop(PARAM_PLACEMENTS[name], axis), src_data_rank=None)
                new = torch.nn.Parameter(d, requires_grad=prm.requires_grad)
                for mod, leaf in homes:
                    mod._parameters[leaf] = new
        if sub is not None:
            _place_stage_outputs(gm, axis)
        layers = PIPELINE["layers"]
        first, last = sum(layers[:idx]), sum(layers[:idx + 1]) - 1
        before = ACTIVATION_PLACEMENTS.get(MODULE_OUTPUTS.get(LAYER_MODULES[first - 1]), None) if first else None
        after = ACTIVATION_PLACEMENTS.get(MODULE_OUTPUTS.get(LAYER_MODULES[last]), None)
        rep = [Replicate()] * len(MESH_AXES)
        _stage_io(gm, sub, _drop(before or rep, axis), _drop(after or rep, axis))
        feeds += cut.get(idx, [])
        stages.append(pipe.build_stage(idx, device, mesh.get_group(axis)))
        modules.append(gm)
    cls = getattr(_sched, _SCHEDULES[PIPELINE["schedule"]])
    loss_fn = lambda out, target: out  # noqa: E731 - the module's forward returns its loss
    schedule = cls(stages if v > 1 else stages[0], n_microbatches=m, loss_fn=loss_fn)
    return PipelineRun(stages, modules, schedule, mesh, axis, _tied_groups(mesh, axis), feeds)


# ---- stages built by hand (a module whose layers are one nn.ModuleList: transformers' models) ----


def _layer_list(model):
    """The nn.ModuleList holding every layer module (LAYER_MODULES "model.layers.0", ...), its path and
    the layers' names in it; None where the layers are not one ModuleList's children (carve's presets:
    torch's tracer cuts those)."""
    import torch
    parents = {path.rpartition(".")[0] for path in LAYER_MODULES}
    if len(parents) != 1:
        return None
    parent = parents.pop()
    try:
        holder = model.get_submodule(parent)
    except AttributeError:
        return None
    if not isinstance(holder, torch.nn.ModuleList):
        return None
    return parent, holder, [path.rpartition(".")[2] for path in LAYER_MODULES]


class _StageOut(Exception):
    """Raised by the stage's last layer's hook: the stage's output, ending the module's forward."""

    def __init__(self, value):
        super().__init__("stage output")
        self.value = value


def _called_from(name):
    """Whether a function of this name is on the caller's stack."""
    import sys
    f = sys._getframe(1)
    while f is not None and f.f_code.co_name != name:
        f = f.f_back
    return f is not None


def _hand_stage_types():
    """The modules a stage cut by hand is made of (_Skip, _NoEmbedding, _HandStage), defined when
    torch is imported (the export's tables load without torch)."""
    import torch

    class _Skip(torch.nn.Module):
        """A layer another stage runs: its input passes through (the stage's first layer takes the
        activation received from the stage before instead)."""

        def forward(self, hidden, *args, **kwargs):
            return hidden


    class _NoEmbedding(torch.nn.Module):
        """An embedding a later stage does not run: zeros of its output's shape (the stage's first layer
        takes the received activation instead), no param, no collective."""

        def __init__(self, width):
            super().__init__()
            self.width = width

        def forward(self, ids, *args, **kwargs):
            import torch
            local = ids.to_local() if hasattr(ids, "to_local") else ids
            return torch.zeros(tuple(local.shape) + (self.width,))

    class _HandStage(torch.nn.Module):
        """One pipeline stage of a module cut by hand (the torchtitan way): the whole module with the
        layers of other stages skipped (_Skip), a later stage's embeddings as _NoEmbedding, its first
        layer given the received activation and its last layer's output ending the forward (_StageOut)
        unless it is the last stage, whose forward returns the module's loss.  Takes and gives plain
        tensors (each rank its block), DTensors on the stage's mesh inside (as _stage_io)."""

        def __init__(self, model, first, last, mesh, boundary_in, boundary_out, feeds, inputs):
            super().__init__()
            self.model, self.mesh, self.feeds, self.inputs = model, mesh, feeds, inputs
            self.boundary_in, self.boundary_out = boundary_in, boundary_out
            self.incoming = None
            if first is not None:
                first.register_forward_pre_hook(self._take, with_kwargs=True)
            if last is not None:
                last.register_forward_hook(self._leave)

        def _take(self, mod, args, kwargs):
            if self.incoming is None:
                return None
            x, self.incoming = self.incoming, None
            if args:
                return (x,) + tuple(args[1:]), kwargs
            return args, dict(kwargs, hidden_states=x)

        @staticmethod
        def _leave(mod, args, out):
            raise _StageOut(out[0] if isinstance(out, (tuple, list)) else out)

        def _placed(self, name, t):
            from torch.distributed.tensor import DTensor
            if self.mesh is None or isinstance(t, DTensor) or not hasattr(t, "dim"):
                return t
            pl = self.boundary_in if name is None else self.inputs.get(name, [Replicate()] * self.mesh.ndim)
            return DTensor.from_local(t, self.mesh, pl, run_check=False)

        def forward(self, *args, **kwargs):
            from torch.distributed.tensor import DTensor
            if self.feeds:  # a later stage: the activation received, the model's inputs fed
                self.incoming = self._placed(None, args[0])
                # PipelineStage's metadata inference (_forward_metadata_inference) runs the forward once
                # more: a look at the next chunk, not a chunk
                look = _called_from("_forward_metadata_inference")
                inputs = [(f.name, f.peek() if look else f()) for f in self.feeds]
            else:
                inputs = list(kwargs.items())
            values = [self._placed(n, t) for n, t in inputs]
            try:
                out = self.model(*values)
            except _StageOut as e:
                out = e.value
            if isinstance(out, DTensor):
                placements = self.boundary_out if out.dim() else [Replicate()] * out.device_mesh.ndim
                out = _redistribute(out, placements).to_local()
            return out

    return _Skip, _NoEmbedding, _HandStage


def _virtual_stage(name, rank):
    """Which of the rank's virtual stages (rank + k * stages) holds param `name`, a param the rank holds
    (PARAM_STAGES lists ranks along the pipeline axis): its layer's (LAYER_MODULES: the module path
    its name starts with; PIPELINE["layers"]), or, outside the layers, the first stage's on rank 0 (an
    embedding) and the last's on the last rank (the final norm, the head, a tied embedding)."""
    p, v, layers = PIPELINE["stages"], PIPELINE["chunks"], PIPELINE["layers"]
    for layer, path in enumerate(LAYER_MODULES):
        if path and name.startswith(path + "."):
            end = 0
            for vs, n in enumerate(layers):
                end += n
                if layer < end:
                    return vs
    if v == 1 or rank == 0:
        return rank
    if rank == p - 1:
        return p * v - 1
    raise PlanError("carve plan: param '%s' is no layer's, on pipeline rank %d of %d: which of its %d virtual stages "
                    "holds it is not known" % (name, rank, p, v))


def _stage_params(params, idx, names, sub, axis, rank):
    """Stage idx's params (of _module_params(module) before it was cut) placed on the stage's mesh
    (the plan's placements without the pipeline axis's) in their modules; names gets each one's;
    returns {plan name: the placed param}."""
    import torch
    from torch.distributed.tensor import distribute_tensor
    placed = {}
    for name, (prm, homes) in params.items():
        if rank not in PARAM_STAGES.get(name, ()) or _virtual_stage(name, rank) != idx:
            continue
        t = prm.detach().reshape(VIEWS[name]) if name in FUSED else prm.detach()
        if sub is not None:
            t = distribute_tensor(t, sub, _drop(PARAM_PLACEMENTS[name], axis), src_data_rank=None)
        new = torch.nn.Parameter(t, requires_grad=prm.requires_grad)
        for mod, leaf in homes:
            mod._parameters[leaf] = new
        placed[name] = new
        names[id(new)] = name
    return placed


def _apply_stages(model, batch, mesh):
    """apply_pipeline for a module whose layers are one nn.ModuleList: each of this rank's virtual
    stages a copy of the module cut by hand (_HandStage), in torch.distributed.pipelining's
    PipelineStage, run by the plan's schedule."""
    import copy
    import torch
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as _sched
    axis = list(MESH_AXES).index(PIPELINE["axis"])
    p, v, m = PIPELINE["stages"], PIPELINE["chunks"], PIPELINE["microbatches"]
    rest = [a for i, a in enumerate(MESH_AXES) if i != axis]
    sub = mesh[tuple(rest)] if rest else None
    rank = mesh.get_local_rank(axis)
    _LossOps.install()
    _Skip, _NoEmbedding, _HandStage = _hand_stage_types()
    stages, modules, feeds, names = [], [], [], {}
    rep = [Replicate()] * len(MESH_AXES)
    for k in range(v):
        idx = rank + k * p
        copy_ = copy.deepcopy(model) if v > 1 else model
        parent, holder, children = _layer_list(copy_)
        params = _module_params(copy_)  # the names before the cut (a tied weight's first)
        layers = PIPELINE["layers"]
        first, last = sum(layers[:idx]), sum(layers[:idx + 1]) - 1
        for i, child in enumerate(children):
            if not first <= i <= last:
                holder._modules[child] = _Skip()
        if idx > 0:  # a later stage: the embeddings are the first stage's
            for path, mod in list(copy_.named_modules()):
                if isinstance(mod, torch.nn.Embedding) and path:
                    owner, _, leaf = path.rpartition(".")
                    copy_.get_submodule(owner)._modules[leaf] = _NoEmbedding(mod.embedding_dim)
        _fused_modules(copy_)
        placed = _stage_params(params, idx, names, sub, axis, rank)
        copy_.register_load_state_dict_pre_hook(
            _load_placed(_aliases(copy_, placed), sub, lambda n: _drop(PARAM_PLACEMENTS[n], axis)))
        if sub is not None:
            _place_stage_outputs(copy_, axis)
        before = ACTIVATION_PLACEMENTS.get(MODULE_OUTPUTS.get(LAYER_MODULES[first - 1]), None) if first else None
        after = ACTIVATION_PLACEMENTS.get(MODULE_OUTPUTS.get(LAYER_MODULES[last]), None)
        mine = [_Feed(n, None, None) for n in batch] if idx > 0 else []
        stage = _HandStage(copy_, holder._modules[children[first]] if idx > 0 else None,
                           holder._modules[children[last]] if idx < p * v - 1 else None,
                           sub, _drop(before or rep, axis), _drop(after or rep, axis), mine,
                           {n: _drop(INPUT_PLACEMENTS.get(n, rep), axis) for n in batch})
        feeds += mine
        device = torch.device(mesh.device_type)
        stages.append(PipelineStage(stage, idx, p * v, device, group=mesh.get_group(axis)))
        modules.append(copy_)
    cls = getattr(_sched, _SCHEDULES[PIPELINE["schedule"]])
    loss_fn = lambda out, target: out  # noqa: E731 - the module's forward returns its loss
    schedule = cls(stages if v > 1 else stages[0], n_microbatches=m, loss_fn=loss_fn)
    return PipelineRun(stages, modules, schedule, mesh, axis, _tied_groups(mesh, axis), feeds, names)


def _tied_groups(mesh, axis):
    """{param: process group of the ranks holding it} for params several stages hold (made on every
    rank in the same order, as torch.distributed.new_group needs)."""
    import torch.distributed as dist
    sets = sorted({tuple(sorted(s)) for s in PARAM_STAGES.values() if len(s) > 1})
    grid = mesh.mesh.movedim(axis, -1).reshape(-1, mesh.mesh.shape[axis])
    me = dist.get_rank()
    mine = {}
    for s in sets:
        for row in grid.tolist():
            g = dist.new_group([row[i] for i in s])
            if me in [row[i] for i in s]:
                mine[s] = g
    return {name: mine[tuple(sorted(s))] for name, s in PARAM_STAGES.items() if len(s) > 1 and tuple(sorted(s)) in mine}
