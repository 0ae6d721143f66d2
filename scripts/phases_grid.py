#!/usr/bin/env python3
"""phases_grid.py — find by search the best fixed options of hakmem for each phases scenario.

    scripts/phases_grid.py [--only REGEX] [--runs N] [--passes N] [--all-options] [--write]
                           [--build DIR] [--smoke]

For `make bench-phases`, the setting "hakmem off+tuned" is hakmem with HAKMEM_LEARN=off and,
per scenario, the fixed options this script found best by hand-free search: the yardstick
that a learning policy has to meet without being told the scenario. It writes them, with the
evidence, to bench/phases_tuned.json (--write; without it, only prints).

The search, per scenario (bench/run.py's phases cells, run as bench/run.py --mode phases
runs them: RSS sampled from outside every 10 ms, page faults from wait4):

- options and values tried (the relevant ones per scenario; --all-options tries all):
  PURGE_DELAY_MS, DIRTY_MAX_MB, BIGCACHE_MB, TCACHE_MAX, SUPERSLAB_RETAIN (VALUES below);
- coordinate descent from the defaults: for each option in turn, the current best and the
  current best with that option at each other value are run --runs times, interleaved
  (round r runs them all, in an order rotated by r); the candidate with the lowest cost
  replaces the current best if it is at least MARGIN better; --passes rounds of that;
- cost = (median wall time / the current best's) x (median RSS integral / the current
  best's): time and memory weigh alike (a 10% faster run may cost 10% more MiB·s);
- last, the defaults and the result are run --runs + 1 times more, interleaved, and the
  ratios reported (time, RSS integral, page faults, peak RSS).

Every run has HAKMEM_LEARN=off. The machine's load moves wall times by several percent;
MARGIN keeps the search from following noise, and the file records every evaluation, so a
reader can judge. A full search (5 scenarios, 2 runs, 1 pass) takes about 15 minutes.
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARGIN = 0.03

VALUES = {
    "PURGE_DELAY_MS": [0, 100, 500, 2000],
    "DIRTY_MAX_MB": [8, 32, 128, 512],
    "BIGCACHE_MB": [0, 64, 128, 256],
    "TCACHE_MAX": [0, 8, 32],
    "SUPERSLAB_RETAIN": [0, 4, 32],
}
# What each scenario can be moved by (the others change nothing there: no huge block in
# burst, one thread's caches in periodic, ...).
RELEVANT = {
    "phases_burst": ["PURGE_DELAY_MS", "DIRTY_MAX_MB", "SUPERSLAB_RETAIN", "TCACHE_MAX"],
    "phases_periodic": ["PURGE_DELAY_MS", "DIRTY_MAX_MB", "SUPERSLAB_RETAIN"],
    "phases_idle_threads": ["PURGE_DELAY_MS", "DIRTY_MAX_MB", "TCACHE_MAX"],
    "phases_huge_loop": ["BIGCACHE_MB", "PURGE_DELAY_MS"],
    "phases_phase_change": ["PURGE_DELAY_MS", "DIRTY_MAX_MB", "SUPERSLAB_RETAIN", "TCACHE_MAX"],
}


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


run = _load("bench_run", os.path.join(ROOT, "bench", "run.py"))
gen = _load("gen_options_doc", os.path.join(ROOT, "scripts", "gen_options_doc.py"))
DEFAULTS = {o.name: o.default for o in gen.load_options() if o.name in VALUES}


def env_of(config):
    """The environment of a configuration: HAKMEM_LEARN=off and every option not at its
    default (so that the file lists only what was changed)."""
    env = {"HAKMEM_LEARN": "off"}
    for k, v in sorted(config.items()):
        if v != DEFAULTS[k]:
            env["HAKMEM_" + k] = str(v)
    return env


def key_of(config):
    return tuple(sorted(config.items()))


def measure(configs, cell, binary, preload, mode, runs, timeout, log):
    """{key: [results]} for every configuration, runs rounds interleaved."""
    out = {key_of(c): [] for c in configs}
    argv = cell.argv(mode)
    for r in range(runs):
        for c in run.rotation(configs, r):
            rec = run.run_sampled(binary, argv, preload, env_of(c), timeout)
            if rec["result"] is None:
                log("  FAIL %s: %s (reproduce: %s)" % (env_of(c), rec["error"], rec["cmd"]))
                continue
            out[key_of(c)].append(rec["result"])
    return out


def medians(results):
    if not results:
        return None
    return {k: statistics.median(r[k] for r in results)
            for k in ("seconds", "rss_integral_mib_s", "faults", "peak_rss_kb")}


def cost(m, base, eps=0.01):
    """Time ratio x memory ratio (eps: runs too short to have a measurable integral)."""
    return ((m["seconds"] + 1e-6) / (base["seconds"] + 1e-6)
            * (m["rss_integral_mib_s"] + eps) / (base["rss_integral_mib_s"] + eps))


def describe(config):
    changed = {k: v for k, v in config.items() if v != DEFAULTS[k]}
    return " ".join("%s=%s" % kv for kv in sorted(changed.items())) or "defaults"


def search(cell, binary, preload, mode, runs, passes, options, timeout, log):
    current = dict(DEFAULTS)
    evaluated = []
    for p in range(passes):
        for opt in options:
            cands = [current] + [dict(current, **{opt: v}) for v in VALUES[opt] if v != current[opt]]
            res = measure(cands, cell, binary, preload, mode, runs, timeout, log)
            base = medians(res[key_of(current)])
            if base is None:
                raise SystemExit("%s: the current configuration (%s) failed every run" % (cell.name, describe(current)))
            best, best_cost = current, 1.0
            for c in cands:
                m = medians(res[key_of(c)])
                if m is None:
                    continue
                cst = cost(m, base)
                evaluated.append({"pass": p, "option": opt, "env": env_of(c), "cost_vs_current": round(cst, 4),
                                  **{k: round(v, 4) for k, v in m.items()}})
                if cst < best_cost:
                    best, best_cost = c, cst
            log("  %-16s %s" % (opt, "  ".join("%s=%s: %.3f" % (opt, c[opt], cost(medians(res[key_of(c)]), base))
                                                for c in cands if res[key_of(c)])))
            if best is not current and best_cost < 1.0 - MARGIN:
                current = best
                log("  -> %s (cost %.3f of the previous best)" % (describe(current), best_cost))
    return current, evaluated


def confirm(cell, binary, preload, mode, runs, config, timeout, log):
    configs = [dict(DEFAULTS)] + ([config] if key_of(config) != key_of(DEFAULTS) else [])
    res = measure(configs, cell, binary, preload, mode, runs, timeout, log)
    d = medians(res[key_of(DEFAULTS)])
    t = medians(res[key_of(config)])
    if d is None or t is None:
        return None
    return {"default": {k: round(v, 4) for k, v in d.items()}, "tuned": {k: round(v, 4) for k, v in t.items()},
            "ratio": {k: round(t[k] / d[k], 3) if d[k] else None for k in d}, "cost": round(cost(t, d), 3)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", metavar="REGEX", help="scenarios (cell names) matching")
    ap.add_argument("--runs", type=int, default=2, help="runs per configuration and step (default 2)")
    ap.add_argument("--passes", type=int, default=1, help="rounds of coordinate descent (default 1)")
    ap.add_argument("--all-options", action="store_true", help="try every option on every scenario")
    ap.add_argument("--build", default="build")
    ap.add_argument("--smoke", action="store_true", help="the smoke arguments (a check of this script)")
    ap.add_argument("--write", action="store_true", help="write bench/phases_tuned.json")
    ap.add_argument("--out", default=run.TUNED_FILE, help="where --write writes (default bench/phases_tuned.json)")
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args(argv)

    cells = run.select_cells(args.only, group="phases")
    if not cells:
        raise SystemExit("no phases scenario matches %s" % args.only)
    build = run.build_dir_path(args.build)
    binary = run.build_programs(args.build, ["phases"])["phases"]
    preload = os.path.join(build, "libhakmem.so")
    if not os.path.exists(preload):
        raise SystemExit("%s not found: run make lib" % preload)
    mode = "smoke" if args.smoke else "phases"
    machine = run.machine_info()
    print("machine: " + run.machine_line(machine))
    try:
        with open(args.out) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    doc.setdefault("scenarios", {})
    command = "scripts/phases_grid.py " + " ".join(argv if argv is not None else sys.argv[1:])
    for cell in cells:
        options = list(VALUES) if args.all_options else RELEVANT.get(cell.name, list(VALUES))
        print("%s: %s over %s" % (cell.name, " ".join(cell.argv(mode)), ", ".join(options)))
        best, evaluated = search(cell, binary, preload, mode, args.runs, args.passes, options,
                                 args.timeout, print)
        check = confirm(cell, binary, preload, mode, args.runs + 1, best, args.timeout, print)
        print("%s: best %s%s" % (cell.name, describe(best), "" if check is None else
                                  " — vs defaults: time x%.2f, RSS integral x%.2f, faults x%.2f, peak RSS x%.2f"
                                  % (check["ratio"]["seconds"], check["ratio"]["rss_integral_mib_s"],
                                     check["ratio"]["faults"], check["ratio"]["peak_rss_kb"])))
        env = {k: v for k, v in env_of(best).items() if k != "HAKMEM_LEARN"}
        doc["scenarios"][cell.name] = {
            "env": env, "args": cell.argv(mode), "options_tried": {o: VALUES[o] for o in options},
            "vs_default": check, "evaluated": evaluated,
            "measured": {"date_utc": machine["date_utc"], "hakmem_commit": machine.get("hakmem_commit"),
                         "loadavg_start": machine.get("loadavg_start"), "runs": args.runs,
                         "passes": args.passes, "command": command}}
    doc["about"] = ("Fixed options of hakmem per phases scenario, found by scripts/phases_grid.py "
                    "(coordinate descent from the defaults; cost = wall time ratio x RSS integral ratio; "
                    "a step must gain %d%%). bench/run.py --mode phases runs them as 'hakmem off+tuned'. "
                    "'evaluated' lists every configuration measured, with medians." % round(MARGIN * 100))
    if args.write:
        if args.smoke:
            raise SystemExit("--write with --smoke: the file is for measured runs")
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        print("wrote %s" % os.path.relpath(args.out, ROOT))
    else:
        print(json.dumps({c: d["env"] for c, d in doc["scenarios"].items()}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
