"""Stand-ins for torch.distributed.tensor's placements (Shard, Replicate,
Partial) and the two modules a `carve export --to torch` file imports, so
the checks of tests/export_check.py and tests/onnx/check_export.py can load
an export and read its placements without a distributed torch."""
import types


class Shard:
    def __init__(self, dim):
        self.dim = dim


class Replicate:
    pass


class Partial:
    def __init__(self, op="sum"):
        self.op = op


def modules():
    """The stand-in torch.distributed.tensor and torch.distributed.device_mesh."""
    tensor = types.ModuleType("torch.distributed.tensor")
    tensor.Shard, tensor.Replicate, tensor.Partial = Shard, Replicate, Partial
    mesh = types.ModuleType("torch.distributed.device_mesh")
    mesh.init_device_mesh = lambda *a, **k: None
    return {"torch.distributed.tensor": tensor, "torch.distributed.device_mesh": mesh}
