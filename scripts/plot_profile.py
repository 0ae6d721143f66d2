#!/usr/bin/env python3
"""plot_profile.py — draw a hakmem heap profile (HAKMEM_PROF_FILE, pprof's format) as an
icicle graph of the live bytes (at exit, or when the profile was written), and print the top allocation sites.

    plot_profile.py PROFILE [OUT.svg|OUT.png] [--title TEXT]

`hakmem run --profile FILE -- program` runs this after the program exits (the command finds
it beside itself, or in PREFIX/share/hakmem/, with pprof_profile.py beside it). The graph:
one row per stack depth, the root at the top, each function as wide as the live bytes
allocated under it (an unbiased estimate from the samples); the bottom of each column is the
function that called malloc or new. The ten sites holding the most go to stdout.

Needs matplotlib and protobuf. If this Python lacks one, Debian's /usr/bin/python3 is tried
(packages python3-matplotlib, python3-protobuf); failing that it says how to install them and
exits with status 3, leaving the profile as it is. Exit status 2: the profile cannot be read.
"""
import os
import sys
import zlib

# pprof_profile.py lies beside this file; no __pycache__ left in share/hakmem/ (uninstall
# removes exactly what install put there)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
import pprof_profile as pp                                        # noqa: E402

EXIT_NO_MODULE = 3
SYSTEM_PYTHON = "/usr/bin/python3"
REEXEC_FLAG = "HAKMEM_PLOT_PROFILE_REEXEC"
SAMPLE_TYPE = "inuse_space"
ROW_IN = 0.24            # height of one stack level, inches
WIDTH_IN = 14.0


def reexec_system_python():
    if (os.environ.get(REEXEC_FLAG) != "1" and os.path.exists(SYSTEM_PYTHON)
            and os.path.realpath(SYSTEM_PYTHON) != os.path.realpath(sys.executable)):
        os.environ[REEXEC_FLAG] = "1"
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def build_tree(stacks):
    """The stacks merged into a tree: node = [value, {name: node}]."""
    root = [0, {}]
    for stack, v in stacks.items():
        root[0] += v
        node = root
        for fn in stack:
            node = node[1].setdefault(fn, [0, {}])
            node[0] += v
    return root


def color(name):
    """A warm colour that depends on the name only, so a function looks the same everywhere."""
    h = zlib.crc32(name.encode())
    return (0.85 + 0.15 * (h & 0xff) / 255, 0.35 + 0.5 * ((h >> 8) & 0xff) / 255,
            0.1 + 0.2 * ((h >> 16) & 0xff) / 255)


def draw(tree, total, out, title, plt):
    rects = []                      # (x, depth, width, name), x and width as fractions
    def walk(node, name, x, depth):
        w = node[0] / total
        if w < 2e-4:                # narrower than a pixel: left out
            return
        rects.append((x, depth, w, name))
        for child_name, child in sorted(node[1].items(), key=lambda kv: -kv[1][0]):
            walk(child, child_name, x, depth + 1)
            x += child[0] / total
    walk(tree, "all", 0.0, 0)
    depth = max(d for _, d, _, _ in rects) + 1
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 1.2 + ROW_IN * depth))
    ax.set_xlim(0, 1)
    ax.set_ylim(depth, 0)           # depth grows downwards: the root at the top
    ax.axis("off")
    fontsize = 7
    char_frac = 0.6 * fontsize / 72 / WIDTH_IN      # one character, as a fraction of the width
    for x, d, w, name in rects:
        ax.add_patch(plt.Rectangle((x, d), w, 0.94, facecolor=color(name), edgecolor="white",
                                   linewidth=0.3))
        fits = int(w / char_frac) - 1
        if fits >= 3:
            label = name if len(name) <= fits else name[:fits - 2] + ".."
            ax.text(x + w / 2, d + 0.47, label.replace("$", r"\$"), ha="center",
                    va="center", fontsize=fontsize, clip_on=True)
    ax.set_title(title.replace("$", r"\$"), fontsize=11)   # no mathtext in a command line
    fig.savefig(out, bbox_inches="tight")
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
    base = src[:-6] if src.endswith(".pb.gz") else os.path.splitext(src)[0]
    out = args[1] if len(args) == 2 else base + ".svg"
    plt = import_pyplot()
    try:
        prof = pp.load(src)
        prof.type_index(SAMPLE_TYPE)
    except pp.ProtobufMissing:
        prof = None
    except (OSError, ValueError, EOFError) as e:
        sys.stderr.write("plot_profile: %s\n" % e)
        return 2
    if plt is None or prof is None:
        reexec_system_python()
        need = [p for p, ok in (("python3-matplotlib", plt), ("python3-protobuf", prof)) if not ok]
        sys.stderr.write("hakmem: cannot draw %s: %s not installed for %s; install %s (apt-get "
                         "install %s, or python3 -m pip install %s) and run %s %s; the profile "
                         "is in %s\n"
                         % (out, " and ".join(n[8:] for n in need), sys.executable,
                            "them" if len(need) > 1 else "it", " ".join(need),
                            " ".join(n[8:] for n in need), os.path.abspath(__file__), src, src))
        return EXIT_NO_MODULE
    names = pp.symbolize(prof)
    stacks = pp.by_stack(prof, SAMPLE_TYPE, names)
    total = sum(stacks.values())
    head = "%s — %s live (estimated: %d stacks, sampled once per %s allocated)" % (
        title or os.path.basename(base), pp.human(total, "bytes"), len(prof.samples),
        pp.human(prof.period, "bytes"))
    if total > 0:
        draw(build_tree(stacks), total, out, head, plt)
    else:
        fig, ax = plt.subplots(figsize=(WIDTH_IN, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, "no sampled allocation was live", ha="center", va="center")
        ax.set_title(head.replace("$", r"\$"), fontsize=11)
        fig.savefig(out, bbox_inches="tight")
        plt.close(fig)
    sites = sorted(pp.by_site(prof, SAMPLE_TYPE, names).items(), key=lambda kv: (-kv[1], kv[0]))
    print("hakmem: live: %s (%d bytes), estimated; the top sites (the caller of malloc/new):"
          % (pp.human(total, "bytes"), total))
    for site, v in sites[:10]:
        print("  %12s %6.2f%%  %s" % (pp.human(v, "bytes"), 100.0 * v / total, site))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
