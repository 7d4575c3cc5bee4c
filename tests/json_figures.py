#!/usr/bin/env python3
"""json_figures.py TEXT JSON [TEXT JSON ...] - the --json document carries the figures of the text.

TEXT is what a carve command printed without --json, JSON what the same command
printed with --json (carve cost, shard, explain, autopart or run; the document's
"format" says which).  From the document alone this script writes the lines
the text must hold, with the text's own formats (times as cost_fmt_time's
"%.3f ms", sizes as "%.4g GiB", ...), and checks each is a line of TEXT, so
every figure the text rounds is the document's value rounded the same way.
Lists the text cuts (the first 5 conflicts, layer 0's params, 24 collectives
a layer) are checked the other way: each line the text shows is one the
document produces.  Prints one line per mismatch and a closing
"N lines matched, N mismatched"; exit 1 on any mismatch, or when fewer lines
matched than the document must yield (so an empty text cannot pass).
Several pairs: the same for each, every line led by "TEXT: ".
"""
import json, sys

GIB, MIB = 1073741824.0, 1048576.0


def fmt_time(s):
    """cost_fmt_time (cost/precision.c)."""
    if s >= 1:
        return "%.3f s" % s
    if s >= 1e-3:
        return "%.3f ms" % (s * 1e3)
    return "%.3f us" % (s * 1e6)


def g4(x):
    return "%.4g" % x


def bytes_str(b):
    """bytes_str (view/text.c): binary units, 4 significant digits."""
    units, i = ["B", "KiB", "MiB", "GiB", "TiB"], 0
    while i < 4 and b >= 1024:
        b, i = b / 1024, i + 1
    return "%.4g %s" % (b, units[i])


def flop_str(x):
    """flop_str (view/text.c): an SI prefix."""
    pre, i = ["", "k", "M", "G", "T", "P", "E"], 0
    while i < 6 and x >= 999.95:
        x, i = x / 1000, i + 1
    return "%.4g %sFLOP" % (x, pre[i])


def pspec(p):
    return json.dumps(p)


def type_str(v):
    return "%s[%s]" % (v["dtype"], ",".join(str(int(d)) for d in v["shape"]))


def mesh_str(doc):
    return ",".join("%s=%d" % (a["name"], a["size"]) for a in doc["mesh"]["axes"])


def layer_name(layer):
    return "outside" if layer is None else "layer %d" % layer


def estimate_lines(e):
    """The estimate section of the text renderer (view/text.c)."""
    a, b, c = fmt_time(e["step_time_s"]), fmt_time(e["compute_s"]), fmt_time(e["communication_s"])
    if e["overlapped"]:
        out = ["step time      %s  (compute %s and communication %s overlapped: the larger of the two)" % (a, b, c)]
    else:
        out = ["step time      %s  (compute %s + communication %s)" % (a, b, c)]
    if e["serialisation"] != 1:
        out.append("               per-device times scaled by %.3g (simulated devices sharing this machine's cores)"
                   % e["serialisation"])
    out.append("FLOPs/device   %s; communicated %s per device (%s on the wire)" %
               (flop_str(e["flops_per_device"]), bytes_str(e["communicated_bytes_per_device"]),
                bytes_str(e["wire_bytes_per_device"])))
    out.append("peak memory    %s GiB per device of %s GiB: %s" % (g4(e["peak_memory_bytes"] / GIB),
               g4(e["memory_capacity_bytes"] / GIB), "fits" if e["fits"] else "DOES NOT FIT"))
    p = e["at_peak_bytes"]
    out.append("  at the peak: own param blocks %s + gathered params %s + optimizer states %s + gradients %s + activations %s + "
               "backward temporaries %s = %s GiB"
               % tuple(g4(x / GIB) for x in [p[k] for k in ("params", "gathered_params", "optimizer_states", "gradients",
                                                             "activations", "other")] + [e["peak_memory_bytes"]]))
    m = e["model_states"]
    out.append("  model states through the step: params %s + optimizer states %s + gradients %s (each param's whole "
               "gradient at its last split) = %s GiB"
               % tuple(g4(x / GIB) for x in (m["params"], m["optimizer_states"], m["gradients"], e["model_state_bytes"])))
    for o in e["by_op_kind"]:
        pct = 100 * o["seconds"] / e["compute_s"] if e["compute_s"] > 0 else 0
        out.append("  %-12s %6d ops %14s  %5.1f%%" % (o["op"], o["count"], fmt_time(o["seconds"]), pct))
    for o in e["by_collective_kind"]:
        out.append("  %-15s %6d %14s  %10.4g MiB on the wire" % (o["kind"], o["count"], fmt_time(o["seconds"]),
                                                             o["wire_bytes"] / MIB))
    n = sum(o["count"] for o in e["by_collective_kind"] if o["kind"] != "slice")
    if e["collective_launches"] != n:
        out.append("  (%d collectives run as %d: gradients combined in buckets, docs/cost-model.md)" %
                   (n, e["collective_launches"]))
    for o in e["by_phase"]:
        out.append("  %-10s %14s %14s" % (o["phase"], fmt_time(o["compute_s"]), fmt_time(o["communication_s"])))
    for o in e["by_layer"]:
        out.append("  %-10s %14s %14s %10.4g" % (layer_name(o["layer"]), fmt_time(o["compute_s"]),
                                               fmt_time(o["communication_s"]), o["wire_bytes"] / MIB))
    return out


def expert_lines(doc):
    """The experts table (view/text.c): this plan's row and each expert's."""
    e = doc["estimate"]
    out = ["  %-44s %14s %11.4g GiB  %s" % ("this plan", fmt_time(e["step_time_s"]), e["peak_memory_bytes"] / GIB,
                                           "" if e["fits"] else "does not fit")]
    for x in doc["experts"]:
        if not x["applies"]:
            out.append("  %-44s %14s %14s  %s" % (x["schedule"], "-", "-", x["why"]))
            continue
        ratio = "x%.3f" % x["time_over_this_plan"] if "time_over_this_plan" in x else ""
        out.append("  %-44s %14s %11.4g GiB  %s%s%s%s" % (
            x["schedule"], fmt_time(x["step_time_s"]), x["peak_memory_bytes"] / GIB, "" if x["fits"] else x["why"],
            "" if x["fits"] else " ", "best expert " if x["best"] else "", ratio))
    return out


def collective_line(c):
    what = c["value"] if not c["value"].startswith("%") or "op" not in c else "for %s -> %s" % (c["op"], c["op_output"])
    return "    %-9s %-15s{%s} %-26s %10.4g MiB %12s" % (c["phase"], c["kind"], ",".join(c["axes"]), what,
                                                     c["bytes_per_device"] / MIB, fmt_time(c["predicted_s"]))


def layer_collectives(doc, text):
    """The collectives per layer (view/text.c): per layer shown, its total line and each
    collective line it lists (the text folds equal layers and cuts at 24)."""
    must, shown = [], []
    by_layer = {}
    for c in doc["collectives"]:
        by_layer.setdefault(c["layer"], []).append(c)
    cur = "none"
    for ln in text:
        if ln.startswith("  in layer ") and ln.endswith(":"):
            cur = int(ln[len("  in layer "):-1])
        elif ln == "  outside layers:":
            cur = None
        elif cur != "none" and ln.startswith("    ") and " collectives, " in ln:
            cs = by_layer.get(cur, [])
            must.append("    %d collectives, %s predicted" % (len(cs), fmt_time(sum(c["predicted_s"] for c in cs))))
            cur = "none"
        elif cur != "none" and ln.startswith("    ") and " MiB " in ln:
            shown.append((ln, {collective_line(c) for c in by_layer.get(cur, [])}))
    if not any(l.startswith("  in layer ") for l in text) and doc["collectives"]:
        must.append("  in layer 0:")
    return must, shown


def param_lines(doc, text, start, fmt):
    """The param rows the text shows (from the line `start` to a blank line),
    each produced by one of the document's params."""
    rows = {fmt(p) for p in doc["params" if "params" in doc else "arguments"]}
    shown, on = [], False
    for ln in text:
        if ln == start:
            on = True
        elif on and (not ln or not ln.startswith("  ") or ln.startswith("  (")):
            break
        elif on:
            shown.append((ln, rows))
    if not shown:
        shown.append(("(no rows after '%s')" % start, set()))
    return shown


def explain_like(doc, text):
    must = estimate_lines(doc["estimate"]) if doc["format"].startswith("carve-explain") else []
    must.append("strategy   %s" % doc["practice"])
    must.append("           in carve's words: %s" % doc["strategy"])
    must += expert_lines(doc)
    m, shown = layer_collectives(doc, text)
    must += m
    shown += param_lines(doc, text, "param shardings (PartitionSpec):",
                         lambda p: "  %-22s %-20s %s" % (p["name"], type_str(p), pspec(p["partition_spec"])))
    return must, shown


def cost(doc, text):
    must = estimate_lines(doc["estimate"])
    must.append("model %s" % doc["model"])
    must.append("mesh %s (%d devices)" % (mesh_str(doc), doc["devices"]))
    must.append("schedule %s" % doc["schedule"])
    must.append("hardware %s (%s)" % (doc["hardware"]["name"], doc["hardware"]["source"]))
    r = doc["replicated"]
    must.append("replicated plan: step %s, peak %s GiB%s; reward of this plan %s" % (
        fmt_time(r["step_time_s"]), g4(r["peak_memory_bytes"] / GIB), "" if r["fits"] else " (does not fit)",
        g4(doc["reward"])))
    return must, []


def explain(doc, text):
    must, shown = explain_like(doc, text)
    p = doc["plan"]
    must.append("plan       %s (%s)" % (p["path"], p["format"]))
    must.append("mesh       %s (%d devices)" % (mesh_str(doc), doc["devices"]))
    must.append("decisions  %d (all replayed; every argument's sharding matches the plan)" % p["decisions"])
    o = doc["cost_options"]
    must.append("options    precision %s, %s, memory per device %s" % (
        o["precision"], "communication overlapped with compute" if o["overlap"] else "no overlap",
        "as given" if o["memory_capacity_bytes"] > 0 else "the profile's"))
    return must, shown


def autopart(doc, text):
    must, shown = explain_like(doc, text)
    e, s = doc["estimate"], doc["search"]
    tail = ", peak memory %s GiB of %s GiB per device%s" % (g4(e["peak_memory_bytes"] / GIB),
                                                           g4(e["memory_capacity_bytes"] / GIB),
                                                           "" if e["fits"] else ": DOES NOT FIT")
    how = " and " if doc["cost_options"]["overlap"] else " + "
    must.append("  step time %s (compute %s%scommunication %s%s)%s" % (
        fmt_time(e["step_time_s"]), fmt_time(e["compute_s"]), how, fmt_time(e["communication_s"]),
        " overlapped" if doc["cost_options"]["overlap"] else "", tail))
    must.append("mesh       %s (%d devices)" % (mesh_str(doc), doc["devices"]))
    must.append("           root actions %d, tree nodes %d, seed %s" % (s["root_actions"], s["tree_nodes"], s["seed"]))
    if doc["actions"]:
        must.append("actions    " + " ".join(doc["actions"]))
    if doc["plan_written"]:
        must.append("plan written to %s" % doc["plan_written"])
    return must + memory_lines(doc["memory"]), shown


def memory_lines(m):
    """The memory level's table (print_memory_level, when more than one
    configuration was searched) and the gather line (print_gather_policy)."""
    out = []
    cf = m["configurations"]
    for c in cf if len(cf) > 1 else []:
        name = c["tactics"] or "none"
        if c["searched"]:
            out.append("  %-26s %14s %10.4g GiB  %d%s%s" % (name, fmt_time(c["step_time_s"]), c["peak_memory_bytes"] / GIB,
                                                         c["evaluations"], "" if c["fits"] else "  does not fit",
                                                         "  chosen" if c["chosen"] else ""))
        else:
            out.append("  %-26s %14s %14s  %s" % (name, "-", "-", c["why"]))
    g, o = m["gather"], m["gather"]["other"]
    if o is None:
        out.append("gather     %s (no param is gathered again in the backward pass: the policy changes nothing here)"
                   % g["policy"])
    else:
        mine = [c for c in cf if c["chosen"]][0]
        out.append("gather     %s%s: %s, %s GiB; %s would take %s, %s GiB%s" % (
            g["policy"], " (chosen by the search)" if g["chosen_by_search"] else " (the schedule's)",
            fmt_time(mine["step_time_s"]), g4(mine["peak_memory_bytes"] / GIB),
            "regather" if g["policy"] == "keep" else "keep", fmt_time(o["step_time_s"]), g4(o["peak_memory_bytes"] / GIB),
            "" if o["fits"] else " (does not fit)"))
    return out


def shard(doc, text):
    must = ["model %s" % doc["model"], "mesh %s (%d devices)" % (mesh_str(doc), doc["devices"]),
            "schedule %s" % doc["schedule"], "conflicts: %d" % len(doc["conflicts"])]
    for i, t in enumerate(doc["tactics"]):
        ln = "  tactic %d: %d decision%s changed the sharding" % (i + 1, t["changed"], "" if t["changed"] == 1 else "s")
        if t["unchanged"]:
            ln += "; %d changed nothing (already so, or blocked by an earlier decision: see conflicts)" % t["unchanged"]
        must.append(ln)
    for c in doc["conflicts"][:5]:
        must.append("  %s%s: '%s' not sharded on %s: %s" % ("at " if c["at"] is not None else "decision", c["at"] or "",
                                                          c["value"], c["axis"], c["why"]))
    b = doc["bytes_per_device"]
    must.append("per device: params %s MiB of %s MiB, optimizer states %s MiB of %s MiB, inputs %s MiB of %s MiB" % tuple(
        g4(b[r][k] / MIB) for r in ("params", "optimizer_states", "inputs") for k in ("local", "global")))
    for kind, phases in doc["collectives"].items():
        must.append("  %-15s" % kind + "".join(" %6d %11.3f" % (phases[ph]["count"], phases[ph]["bytes_per_device"] / MIB)
                                               for ph in ("forward", "backward", "optimizer")))
    shown = param_lines(doc, text, "arguments:", lambda a: "  %-22s %-9s %-22s %s" % (
        a["name"], a["role"], type_str(a), pspec(a["partition_spec"])))
    return must, shown


def run(doc, text):
    """carve run (view/run_text.c).  The text and the document come from two
    runs of the same command: figures that measure time differ between them,
    so a line that holds one is matched on what comes before it (a prefix,
    PREFIX below); the losses, memory laid out, collective counts and bytes
    and the checks are the same bits in both runs."""
    n = doc["devices"]
    must = ["model %s" % doc["model"], "mesh %s (%d devices), schedule %s" % (mesh_str(doc), n, doc["schedule"])]
    if "inputs" in doc:
        must.append("inputs from %s" % doc["inputs"])
    m = doc["memory"]
    if doc["backend"]["kind"] == "threads":
        if m["all_devices_bytes"] < m["per_device_bytes"] * n:
            must.append("memory: up to %.1f MiB per device (its stage's arena), %.1f MiB for all %d + reference %.1f MiB = %.1f MiB"
                        % (m["per_device_bytes"] / MIB, m["all_devices_bytes"] / MIB, n, m["reference_bytes"] / MIB,
                           (m["all_devices_bytes"] + m["reference_bytes"]) / MIB))
        else:
            must.append("memory: %.1f MiB per device x %d + reference %.1f MiB = %.1f MiB"
                        % (m["per_device_bytes"] / MIB, n, m["reference_bytes"] / MIB,
                           (m["all_devices_bytes"] + m["reference_bytes"]) / MIB))
    for s in doc["steps"]:
        if None in (s["loss_reference"], s["loss"], s["loss_relative_difference"]):
            continue  # not finite: the text prints nan or inf
        must.append(PREFIX + "%5d %16.9g %16.9g %10.2e " % (s["step"], s["loss_reference"], s["loss"], s["loss_relative_difference"]))
    for c in doc["last_step"]["collectives"]:
        must.append(PREFIX + "  %-15s %6d %12.3f " % (c["kind"], c["count"], c["program_bytes"] / MIB))
    must.append("  sums run over groups of up to %d devices: " % doc["last_step"]["largest_sum_devices"] + "%s"
                % ("the same bits on both backends (two terms add the same in either order)" if doc["last_step"]["largest_sum_devices"] <= 2
                   else "the MPI backend may differ from the threads one in the last bits (Open MPI orders the terms)"))
    if "pipeline" in doc:
        p = doc["pipeline"]
        must.append(PREFIX + "pipeline over axis %s: %d stages, %s, %d micro-batches, layers %s" % (
            p["axis"], p["stages"], p["schedule"], p["microbatches"], "/".join(str(k) for k in p["layers_per_virtual_stage"])))
        for g in p["per_stage"]:
            if g["predicted_idle"] is not None:
                must.append(PREFIX + "  %5d  %9.3f  " % (g["stage"], g["predicted_idle"]))
    else:
        if m["predicted_peak_bytes"] is not None:
            must.append("  predicted (the cost model's peak for this program, f32)   %10.2f" % (m["predicted_peak_bytes"] / MIB))
        must.append("  laid out (the device's arena, buffers placed by liveness)  %10.2f" % (m["laid_out_bytes"] / MIB))
    for c in (c for c in doc["checks"] if None not in (c["loss"], c["params"], c["optimizer_states"], c["replicas"])):
        must.append("check against %s (tolerance %.0e, relative to each tensor's largest magnitude):" % (c["against"], c["tolerance"]))
        must.append("  loss (worst step)  %10.2e" % c["loss"])
        must.append("  params             %10.2e  (worst: %s)" % (c["params"], c["worst_param"] or "-"))
        must.append("  optimizer states   %10.2e  (worst: %s)" % (c["optimizer_states"], c["worst_state"] or "-"))
        must.append("  replicas           %10.2e  (largest difference between copies of one block)" % c["replicas"])
        if c["update_scaled_params"]:
            must.append("  %d param%s smaller than the largest update (%.2e) measured against it: a gradient against the model's "
                        "gradient scale (docs/run.md)" % (c["update_scaled_params"], "" if c["update_scaled_params"] == 1 else "s",
                                                          c["largest_update"]))
        must.append("  outputs digest     %s  (FNV-1a of the bits of every output, last step: equal digests, equal bits)"
                    % c["outputs_digest"])
    must.append("check: %s" % ("passed" if doc["passed"] else "FAILED"))
    return must, []


PREFIX = "\0prefix:"  # a must-line that the text holds at the start of one of its lines


def figures(text_path, doc_path):
    """The lines matched and mismatched of one pair, and a line per mismatch."""
    text = [l.rstrip() for l in open(text_path).read().splitlines()]
    doc = json.load(open(doc_path))
    kind = doc["format"].split("/")[0].replace("carve-", "")
    must, shown = {"cost": cost, "explain": explain, "autopart": autopart, "shard": shard, "run": run}[kind](doc, text)
    lines = set(text)
    ok = bad = 0
    said = []
    for m in must:
        if m.startswith(PREFIX) and any(l.startswith(m[len(PREFIX):]) for l in text) or m.rstrip() in lines:
            ok += 1
        else:
            bad += 1
            said.append("missing from the text: %r" % m.replace(PREFIX, "(the start of a line) "))
    for ln, rows in shown:
        if ln in {r.rstrip() for r in rows}:
            ok += 1
        else:
            bad += 1
            said.append("not from the document: %r" % ln)
    floor = {"cost": 12, "explain": 14, "autopart": 12, "shard": 10, "run": 12}[kind]
    if ok < floor:
        bad += 1
        said.append("only %d lines matched; the document must yield at least %d" % (ok, floor))
    return ok, bad, said


def main():
    """TEXT JSON: its mismatches and the closing line.  TEXT JSON TEXT JSON ...
    (one Python start for many pairs): the same, each line led by "TEXT: "."""
    args, any_bad = sys.argv[1:], 0
    for i in range(0, len(args) - 1, 2):
        ok, bad, said = figures(args[i], args[i + 1])
        lead = "%s: " % args[i] if len(args) > 2 else ""
        for ln in said + ["%d lines matched, %d mismatched" % (ok, bad)]:
            print(lead + ln)
        any_bad |= bad > 0
    sys.exit(1 if any_bad else 0)


main()
