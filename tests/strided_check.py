#!/usr/bin/env python3
"""strided_check.py - DTensor's _StridedShard holds carve's blocks of a dim split over several mesh dims in
any order (issue 42; docs/export.md, `--to torch`).

    strided_check.py        (8 gloo CPU processes; prints `N passed, N failed`)

For every order of a dim of 16 split over one, two and three dims of a 2x2x2 mesh, the placements the torch
export writes (view/export_torch.c torch_split_factor: mesh dim a is _StridedShard(d, split_factor=k), k the
product of the sizes of the mesh dims that split d before a in carve's order and come after a in the mesh;
Shard(d) where k is 1) are given to distribute_tensor, and each rank's local block must be the one carve's
executor holds (analysis/mesh.c dim_walk: the offset sums each axis's coordinate times its block, major axis
first), and full_tensor() the whole."""
import itertools
import os
import sys
import tempfile

SIZES = (2, 2, 2)
N = 16


def split_factor(order, a):
    sf = 1
    for x in order:
        if x == a:
            break
        if x > a:
            sf *= SIZES[x]
    return sf


def carve_offset(order, coord):
    org, block = 0, N
    for a in order:
        block //= SIZES[a]
        org += coord[a] * block
    return org, block


def worker(rank, store, out):
    import logging
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)  # "sequential all_gathers"
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=8)
    mesh = init_device_mesh("cpu", SIZES, mesh_dim_names=("a", "b", "c"))
    coord = (rank // 4, rank // 2 % 2, rank % 2)
    t = torch.arange(float(N))
    lines = []
    for k in (1, 2, 3):
        for order in itertools.permutations(range(3), k):
            pl = [Replicate()] * 3
            for a in order:
                sf = split_factor(order, a)
                pl[a] = _StridedShard(0, split_factor=sf) if sf > 1 else Shard(0)
            org, block = carve_offset(order, coord)
            d = distribute_tensor(t, mesh, pl, src_data_rank=None)
            ok = torch.equal(d.to_local(), t[org:org + block]) and torch.equal(d.full_tensor(), t)
            lines.append("%s order %s %s" % ("ok  " if ok else "FAIL", "".join("abc"[a] for a in order), pl))
    if rank == 0 or any(x.startswith("FAIL") for x in lines):
        with open("%s.%d" % (out, rank), "w") as f:
            f.write("\n".join(lines) + "\n")
    dist.destroy_process_group()


def main():
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out")
        mp.spawn(worker, args=(os.path.join(d, "store"), out), nprocs=8)
        lines = []
        for name in sorted(os.listdir(d)):
            if name.startswith("out."):
                lines += ["rank %s: %s" % (name[4:], x) for x in open(os.path.join(d, name)).read().split("\n") if x]
    orders = {x.split()[4] for x in lines}  # "rank R: ok|FAIL order ORDER [...]"
    failed = {x.split()[4] for x in lines if x.split()[2] == "FAIL"}
    for x in lines:
        if x.startswith("rank 0:") or "FAIL" in x:
            print(x)
    expected = sum(len(list(itertools.permutations(range(3), k))) for k in (1, 2, 3))
    failed |= {"missing"} if len(orders) != expected else set()
    print("%d passed, %d failed" % (len(orders - failed), len(failed)))
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
