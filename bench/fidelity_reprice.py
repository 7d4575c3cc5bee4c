#!/usr/bin/env python3
"""fidelity_reprice.py - re-prices a bench_fidelity run's plans on its own profiles.

    build/bench/bench_fidelity -o DIR            # writes DIR/profile-A.json ..., DIR/times.tsv
    python3 bench/fidelity_reprice.py DIR [JSON] [--carve build/carve] [-v]

Each plan of DIR/times.tsv (model, mesh, schedule, devices, measured s) is priced
with `carve cost --hw` on the profile of its model (DIR/profile-M.json, M = A, B, C, D
in the order the models appear; it holds the einsum shapes timed in that run), after
replacing the profile's fields with those of JSON (e.g. '{"cache_bytes": 0}' prices
without the cache model, '{"gemm_times": []}' without the timed shapes), and the script
prints Spearman and the median |error| per set (the held-out model: the seventh column
of times.tsv, or the last model in runs that lack it) and per device count, as
bench_fidelity does.  Nothing is measured again: it compares pricing
rules on the same measurements.
"""
import json, os, re, statistics, subprocess, sys, tempfile

UNIT = {'s': 1.0, 'ms': 1e-3, 'us': 1e-6}


def ranks(v):
    return [sum(y < x for y in v) + (sum(y == x for y in v) + 1) / 2 for x in v]


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    sab = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    saa = sum((x - ma) ** 2 for x in ra)
    sbb = sum((y - mb) ** 2 for y in rb)
    return sab / (saa * sbb) ** 0.5 if saa and sbb else 0.0


def price(carve, model, mesh, sched, hw):
    # `carve cost` needs a schedule: "none" is the replicated plan it prints beside dp's
    args = [carve, 'cost', '--model', model, '--mesh', mesh, '--hw', hw,
            '--schedule', 'dp:batch' if sched == 'none' else sched]
    out = subprocess.run(args, capture_output=True, text=True).stdout
    pat = r'replicated plan: step ([\d.]+) (s|ms|us)' if sched == 'none' else r'step time\s+([\d.]+) (s|ms|us)'
    m = re.search(pat, out)
    if not m:
        sys.exit(f"fidelity_reprice: carve cost gave no step time for {model} {mesh} {sched}")
    return float(m.group(1)) * UNIT[m.group(2)]


def main():
    args = [a for a in sys.argv[1:]]
    carve, verbose = 'build/carve', '-v' in args
    args = [a for a in args if a != '-v']
    if '--carve' in args:
        i = args.index('--carve')
        carve = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    run_dir, over = args[0], json.loads(args[1]) if len(args) > 1 else {}
    rows, models, tmp, held_out = [], [], {}, set()
    for line in open(os.path.join(run_dir, 'times.tsv')):
        cols = line.rstrip('\n').split('\t')
        model, mesh, sched, dev, meas = cols[:5]
        if len(cols) > 6 and cols[6] == '1':
            held_out.add(model)
        if model not in models:
            models.append(model)
            hw = json.load(open(os.path.join(run_dir, f'profile-{chr(65 + len(models) - 1)}.json')))
            hw.update(over)
            f = tempfile.NamedTemporaryFile('w', suffix='.json', delete=False)
            json.dump(hw, f)
            f.close()
            tmp[model] = f.name
        rows.append((models.index(model), mesh, sched, int(dev), float(meas), price(carve, model, mesh, sched, tmp[model])))
    for name in tmp.values():
        os.unlink(name)
    held = {models.index(m) for m in held_out} if held_out else {len(models) - 1}
    for label, sel in (('judging', lambda r: r[0] not in held), ('held out', lambda r: r[0] in held)):
        sets = [('all', [r for r in rows if sel(r)])] + [(f'{d} dev', [r for r in rows if sel(r) and r[3] == d]) for d in (1, 2, 4)]
        for what, rs in sets:
            if len(rs) < 2:
                continue
            err = statistics.median(abs(r[5] - r[4]) / r[4] for r in rs)
            print(f"{label:8s} {what:6s} plans {len(rs):2d}  Spearman {spearman([r[5] for r in rs], [r[4] for r in rs]):.3f}"
                  f"  median |error| {100 * err:.1f}%")
        one = [f"{chr(65 + r[0])} {100 * (r[5] - r[4]) / r[4]:+.1f}%" for r in rows if sel(r) and r[3] == 1 and r[2] == 'none']
        print(f"{label:8s} 1-device step: {' '.join(one)}")
    if verbose:
        for r in rows:
            print(f"{chr(65 + r[0])} {r[1]:16s} {r[2]:38s} measured {r[4]:.4f} predicted {r[5]:.4f} {100 * (r[5] - r[4]) / r[4]:+.0f}%")


if __name__ == '__main__':
    main()
