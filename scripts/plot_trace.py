#!/usr/bin/env python3
"""plot_trace.py — draw a hakmem trace (HAKMEM_TRACE_FILE's CSV) as a PNG.

    plot_trace.py TRACE.csv [OUT.png] [--title TEXT]

`hakmem run --trace FILE -- program` runs this after the program exits (the command finds
it beside itself, or in PREFIX/share/hakmem/). Three panels over time: what the process
holds (resident memory, hakmem's committed memory, and stacked: the blocks the program
holds, huge blocks, blocks in thread caches per tier, free space inside spans in use, dirty
span units, unpurged BigCache mappings),
the program's activity (mallocs per second, live threads), and every learned parameter
with the number of times it changed.

Needs matplotlib. If this Python has none, Debian's /usr/bin/python3 is tried (package
python3-matplotlib); failing that it says how to install it and exits with status 3,
leaving the CSV as it is. Exit status 2: the CSV cannot be read.
"""
import csv
import os
import sys

EXIT_NO_MATPLOTLIB = 3
SYSTEM_PYTHON = "/usr/bin/python3"
REEXEC_FLAG = "HAKMEM_PLOT_TRACE_REEXEC"

LEARNED_PREFIX = "learned."


def read_trace(path):
    """{column: [values]} and the learned parameters' names, from the CSV."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise ValueError("%s is empty (no header)" % path)
    head = rows[0]
    missing = [c for c in ("time_ms", "rss") if c not in head]
    if missing:
        raise ValueError("%s: no %s column (is it a hakmem trace?)" % (path, ", ".join(missing)))
    cols = {h: [] for h in head}
    for r in rows[1:]:
        if len(r) != len(head):          # a row cut short by a kill: skip it
            continue
        try:
            vals = [float(x) for x in r]
        except ValueError:
            continue
        for h, v in zip(head, vals):
            cols[h].append(v)
    learned = [h for h in head if h.startswith(LEARNED_PREFIX)]
    return cols, learned


def changes(series):
    return sum(1 for a, b in zip(series, series[1:]) if a != b)


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        if (os.environ.get(REEXEC_FLAG) != "1" and os.path.exists(SYSTEM_PYTHON)
                and os.path.realpath(SYSTEM_PYTHON) != os.path.realpath(sys.executable)):
            os.environ[REEXEC_FLAG] = "1"
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def draw(cols, learned, out, title, plt):
    t = [v / 1000.0 for v in cols["time_ms"]]
    mib = lambda name: [v / 1048576.0 for v in cols.get(name, [0.0] * len(t))]
    fig = plt.figure(figsize=(10, 7.2))
    gs = fig.add_gridspec(3, 1, height_ratios=[3.2, 1.1, 2.0], hspace=0.12)
    ax = fig.add_subplot(gs[0])
    n = len(t)
    if "spans" in cols:           # free space inside spans in use: spans - blocks out of them
        cached = [sum(cols[c][i] for c in ("cached_tiny", "cached_mid", "cached_large") if c in cols)
                  for i in range(n)]
        cols["span_free"] = [max(0.0, cols["spans"][i] - cols["in_use"][i] - cached[i]) for i in range(n)]
    stack = [("in_use", "blocks in use", "#bdbdbd"),
             ("huge_in_use", "huge blocks in use", "#969696"),
             ("cached_tiny", "thread caches: tiny", "#9ecae1"),
             ("cached_mid", "thread caches: mid", "#4292c6"),
             ("cached_large", "thread caches: large", "#08519c"),
             ("span_free", "free in spans in use (pinned)", "#c7e9c0"),
             ("pool_dirty", "dirty span units (free, not purged)", "#fdae6b"),
             ("bigcache_dirty", "BigCache (not purged)", "#e6550d")]
    present = [s for s in stack if s[0] in cols]
    if present:
        ax.stackplot(t, *[mib(s[0]) for s in present], labels=[s[1] for s in present],
                     colors=[s[2] for s in present], alpha=0.85, step="post")
    ax.step(t, mib("rss"), where="post", color="black", linewidth=1.4, label="resident (RSS)")
    if "committed" in cols:
        ax.step(t, mib("committed"), where="post", color="#636363", linewidth=1.0,
                linestyle="--", label="hakmem committed")
    ax.set_ylabel("MiB")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=7, ncol=2)
    ax.set_title(title.replace("$", r"\$"), fontsize=11)   # no mathtext in a command line
    plt.setp(ax.get_xticklabels(), visible=False)

    ax2 = fig.add_subplot(gs[1], sharex=ax)
    if "allocs" in cols and len(t) > 1:
        a = cols["allocs"]
        # a row that came late is followed by one that comes early: divide by at least the
        # usual period, so that the rate has no spikes that are only the sampler's
        gaps = sorted(t[i] - t[i - 1] for i in range(1, len(t)))
        floor = max(1e-3, gaps[len(gaps) // 2])
        rate = [0.0] + [max(0.0, (a[i] - a[i - 1]) / max(floor, t[i] - t[i - 1])) for i in range(1, len(t))]
        ax2.step(t, [r / 1e6 for r in rate], where="post", color="#31a354", linewidth=1.0,
                 label="mallocs per second (millions)")
        ax2.set_ylabel("M mallocs/s", fontsize=8)
        ax2.set_ylim(bottom=0)
    if "threads" in cols:
        ax3 = ax2.twinx()
        ax3.step(t, cols["threads"], where="post", color="#756bb1", linewidth=1.0, label="live threads")
        ax3.set_ylabel("threads", fontsize=8)
        ax3.set_ylim(bottom=0, top=max(cols["threads"] + [1]) * 1.25)
        h1, l1 = ax2.get_legend_handles_labels()
        h2, l2 = ax3.get_legend_handles_labels()
        ax2.legend(h1 + h2, l1 + l2, loc="upper right", fontsize=7, ncol=2)
    ax2.grid(alpha=0.3)
    plt.setp(ax2.get_xticklabels(), visible=False)

    ax4 = fig.add_subplot(gs[2], sharex=ax)
    for name in learned:
        s = cols[name]
        if not s:
            continue
        short = name[len(LEARNED_PREFIX):]
        label = "%s: %g" % (short, s[0]) if changes(s) == 0 else \
            "%s: %g → %g (%d changes)" % (short, s[0], s[-1], changes(s))
        ax4.step(t, s, where="post", linewidth=1.2, label=label)
    ax4.set_yscale("symlog", linthresh=1)
    ax4.set_ylabel("learned parameters", fontsize=8)
    ax4.set_xlabel("seconds since start")
    ax4.grid(alpha=0.3)
    if learned:
        ax4.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    else:
        ax4.text(0.5, 0.5, "no learned parameters registered", transform=ax4.transAxes,
                 ha="center", va="center", fontsize=8)
    fig.savefig(out, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main(argv):
    args, title = [], None
    i = 0
    while i < len(argv):
        if argv[i] == "--title" and i + 1 < len(argv):
            title = argv[i + 1]
            i += 2
            continue
        if argv[i] in ("-h", "--help"):
            print(__doc__)
            return 0
        args.append(argv[i])
        i += 1
    if len(args) not in (1, 2):
        sys.stderr.write(__doc__)
        return 2
    src = args[0]
    out = args[1] if len(args) == 2 else os.path.splitext(src)[0] + ".png"
    try:
        cols, learned = read_trace(src)
    except (OSError, ValueError) as e:
        sys.stderr.write("plot_trace: %s\n" % e)
        return 2
    plt = import_pyplot()
    if plt is None:
        sys.stderr.write("hakmem: cannot draw %s: matplotlib is not installed for %s; install it "
                         "(apt-get install python3-matplotlib, or python3 -m pip install matplotlib) "
                         "and run %s %s; the trace is in %s\n"
                         % (out, sys.executable, os.path.abspath(__file__), src, src))
        return EXIT_NO_MATPLOTLIB
    draw(cols, learned, out, title or os.path.basename(os.path.splitext(src)[0]), plt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
