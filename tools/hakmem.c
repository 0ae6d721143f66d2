/* hakmem — the command-line front end: run a program under hakmem, show the options.
 *
 *   hakmem run [--stats] [--trace FILE] [--profile FILE] [--set NAME=VALUE]... [--lib PATH]
 *              [--] PROGRAM [ARGS...]
 *   hakmem options
 *   hakmem version
 *
 * The command links the hak_* API only (libhakmem_api.a): its own malloc stays glibc's,
 * and it never needs the preload itself. It uses the library's option table to check
 * --set names and values before the program starts, so a typo fails here, loudly, instead
 * of becoming a warning line inside the program's stderr.
 *
 * `run` never initialises hakmem in this process (hak_option_set before initialisation
 * only parses; hak_option_get only reads), so nothing of this process's own state leaks
 * into the program: the options reach it through HAKMEM_* variables, as they would from a
 * shell.
 *
 * Finding libhakmem.so (the first that exists wins; see docs/OPTIONS.md):
 *   1. --lib PATH
 *   2. <dir>/../lib/libhakmem.so    where <dir> holds this executable (installed layout:
 *                                   PREFIX/bin/hakmem beside PREFIX/lib/libhakmem.so)
 *   3. <dir>/libhakmem.so           the build tree: build/hakmem beside build/libhakmem.so
 * <dir> comes from /proc/self/exe, so symlinks to the command and PATH lookups do not
 * matter. The library path is made absolute, because the program may change directory
 * before it starts a child that inherits LD_PRELOAD.
 *
 * Exit status of `run`: the program's own (exec replaces this process); 125 when hakmem
 * itself fails (bad arguments, unknown option, no library); 126 when the program exists but
 * cannot be executed; 127 when it is not found — the conventions of env(1) and timeout(1).
 * The other commands exit 0, or 2 on a usage error.
 *
 * `run --trace FILE` and `run --profile FILE` cannot exec in place: they run the program as
 * a child, wait for it (ignoring SIGINT and SIGQUIT meanwhile, as system(3) does, so ^C
 * reaches the program and the picture is still drawn), draw the pictures, and exit as the
 * program did (a program killed by a signal: the same signal, raised again). --trace gives
 * it HAKMEM_TRACE_FILE=FILE.csv (FILE itself if it ends in .csv) and draws FILE.png with
 * scripts/plot_trace.py; --profile gives it HAKMEM_PROF=1 and HAKMEM_PROF_FILE=FILE.pb.gz
 * (FILE itself if it ends in .pb.gz), and draws the bytes live at exit by stack into
 * FILE.svg with scripts/plot_profile.py (which also prints the top allocation sites, and
 * imports pprof_profile.py from beside itself). The two may be combined. A script is looked
 * for as <dir>/../share/hakmem/NAME (installed), <dir>/NAME (the build tree; make copies
 * it there) and <dir>/../scripts/NAME. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hakmem.h"

enum { EXIT_USAGE = 2, EXIT_RUN_FAILED = 125, EXIT_CANNOT_EXEC = 126, EXIT_NOT_FOUND = 127 };

static const char usage_text[] =
    "usage: hakmem run [--stats] [--trace FILE] [--profile FILE] [--set NAME=VALUE]...\n"
    "                  [--lib PATH] [--] PROGRAM [ARGS...]\n"
    "       hakmem options\n"
    "       hakmem version\n"
    "       hakmem --help\n"
    "\n"
    "commands:\n"
    "  run      run PROGRAM with hakmem as its allocator (LD_PRELOAD=libhakmem.so)\n"
    "             --stats            print hakmem's statistics when the program exits\n"
    "                                (HAKMEM_STATS=1; to a file with --set STATS_FILE=PATH)\n"
    "             --trace FILE       record memory use and learned parameters over time into\n"
    "                                FILE.csv (HAKMEM_TRACE_FILE; every 50 ms, --set\n"
    "                                TRACE_MS=N to change) and draw FILE.png when the program\n"
    "                                exits (python3 with matplotlib)\n"
    "             --profile FILE     sample allocations with their stacks (HAKMEM_PROF=1, one\n"
    "                                per 512 KiB on average: --set PROF_SAMPLE=N) into\n"
    "                                FILE.pb.gz, pprof's format (HAKMEM_PROF_FILE); when the\n"
    "                                program exits, draw the bytes still live by stack into\n"
    "                                FILE.svg and print the top sites (python3 with matplotlib\n"
    "                                and protobuf, binutils); `pprof FILE.pb.gz` reads it too\n"
    "             --set NAME=VALUE   set option HAKMEM_NAME=VALUE; the name and value are\n"
    "                                checked against the option table first\n"
    "             --lib PATH         preload this libhakmem.so instead of the one found\n"
    "                                beside the command (../lib/, then its own directory)\n"
    "           exit status: the program's; 125 if hakmem fails, 126 if the program\n"
    "           cannot be executed, 127 if it is not found\n"
    "  options  print every option with its value from the environment, default, accepted\n"
    "           values and description\n"
    "  version  print hakmem's version\n";

static void usage(FILE *out) { fputs(usage_text, out); }

static int usage_error(const char *fmt, const char *arg, int status) {
    fputs("hakmem: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n(see `hakmem --help`)\n", stderr);
    return status;
}

/* ---- the option table ----------------------------------------------------------------- */

/* What the option table says option `name` accepts (its "accepts" column), into buf; an
 * empty string when it cannot be found. The library prints the table; this reads it back
 * from memory rather than duplicating the table here. */
static void option_accepts(const char *name, char *buf, size_t cap) {
    buf[0] = 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL) return;
    hak_options_print(f);
    fclose(f);
    char var[160];
    snprintf(var, sizeof var, "HAKMEM_%s", name);
    for (char *line = text; line && *line;) {
        char *next = strchr(line, '\n');
        if (next) *next++ = 0;
        /* columns: option value default accepts description */
        char opt[128], value[128], def[128], acc[256];
        if (sscanf(line, "%127s %127s %127s %255s", opt, value, def, acc) == 4 &&
            strcmp(opt, var) == 0) {
            snprintf(buf, cap, "%s", acc);
            break;
        }
        line = next;
    }
    free(text);
}

/* NAME=VALUE from --set: the option name upper-cased, without a HAKMEM_ prefix, checked
 * against the table; on success *env_out is "HAKMEM_NAME=VALUE" (allocated). */
static int parse_set(const char *arg, char **env_out) {
    const char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg)
        return usage_error("--set wants NAME=VALUE, got '%s'", arg, EXIT_RUN_FAILED);
    size_t n = (size_t)(eq - arg);
    char name[128];
    if (n >= sizeof name)
        return usage_error("option name too long in --set %s", arg, EXIT_RUN_FAILED);
    for (size_t i = 0; i < n; i++)         /* purge-delay-ms means PURGE_DELAY_MS */
        name[i] = arg[i] == '-' ? '_' : (char)toupper((unsigned char)arg[i]);
    name[n] = 0;
    const char *bare = strncmp(name, "HAKMEM_", 7) == 0 ? name + 7 : name;
    const char *value = eq + 1;

    /* This process never initialises hakmem, so setting it here only checks the value; a
     * text option (STATS_FILE, TRACE_FILE, PROF_FILE, ...) takes any value. */
    if (hak_option_set(bare, value) != 0) {
        errno = 0;
        if (hak_option_get(bare) == -1 && errno == EINVAL) {
            fprintf(stderr, "hakmem: unknown option '%.*s' in --set %s "
                    "(`hakmem options` lists them)\n", (int)n, arg, arg);
            return EXIT_RUN_FAILED;
        }
        char acc[256];
        option_accepts(bare, acc, sizeof acc);
        fprintf(stderr, "hakmem: bad value '%s' for HAKMEM_%s (accepts %s)\n", value, bare,
                acc[0] ? acc : "what `hakmem options` lists");
        return EXIT_RUN_FAILED;
    }
    size_t need = 7 + strlen(bare) + 1 + strlen(value) + 1;
    char *env = malloc(need);
    if (env == NULL) { perror("hakmem"); return EXIT_RUN_FAILED; }
    snprintf(env, need, "HAKMEM_%s=%s", bare, value);
    *env_out = env;
    return 0;
}

/* ---- finding the library ------------------------------------------------------------- */

/* Absolute, canonical path of `path` into out (PATH_MAX) if it is a readable file. */
static int usable_library(const char *path, char *out) {
    if (access(path, R_OK) != 0) return 0;
    return realpath(path, out) != NULL;
}

/* The libhakmem.so to preload, into out (PATH_MAX); 0 and a message when none is found. */
static int find_library(const char *explicit_path, char *out) {
    if (explicit_path) {
        if (usable_library(explicit_path, out)) return 1;
        fprintf(stderr, "hakmem: --lib %s: %s\n", explicit_path, strerror(errno));
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "hakmem: cannot find my own location (/proc/self/exe: %s); "
                "give the library with --lib PATH\n", strerror(errno));
        return 0;
    }
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    const char *candidates[] = { "/../lib/libhakmem.so", "/libhakmem.so" };
    char tried[2][PATH_MAX];
    for (size_t i = 0; i < 2; i++) {
        snprintf(tried[i], sizeof tried[i], "%s%s", exe, candidates[i]);
        if (usable_library(tried[i], out)) return 1;
    }
    fprintf(stderr, "hakmem: libhakmem.so not found (tried %s and %s); "
            "give it with --lib PATH\n", tried[0], tried[1]);
    return 0;
}

/* LD_PRELOAD with the library first, so its malloc wins over any other preload. */
static int set_preload(const char *lib) {
    /* The dynamic loader splits LD_PRELOAD at spaces and colons. */
    if (strpbrk(lib, " :\t\n")) {
        fprintf(stderr, "hakmem: cannot preload %s: LD_PRELOAD cannot hold a path with "
                "spaces or colons\n", lib);
        return 0;
    }
    const char *old = getenv("LD_PRELOAD");
    if (old == NULL || *old == 0) return setenv("LD_PRELOAD", lib, 1) == 0;
    size_t n = strlen(lib);                     /* already first (hakmem run inside one) */
    if (strncmp(old, lib, n) == 0 && (old[n] == 0 || old[n] == ':' || old[n] == ' ')) return 1;
    size_t need = strlen(lib) + 1 + strlen(old) + 1;
    char *v = malloc(need);
    if (v == NULL) return 0;
    snprintf(v, need, "%s:%s", lib, old);
    int ok = setenv("LD_PRELOAD", v, 1) == 0;
    free(v);
    return ok;
}

/* ---- run --trace, run --profile --------------------------------------------------------- */

/* What --trace and --profile have the program write, and how its picture is drawn. */
typedef struct {
    const char *what;        /* "trace", "profile": the messages' word */
    const char *verb;        /* "traced", "profiled" */
    const char *script;      /* what draws it, from scripts/ */
    const char *packages;    /* what the script needs, for the message when python3 is missing */
    char *data, *pic;        /* absolute paths, allocated */
} output_t;

/* Directory of this executable into dir (PATH_MAX); 0 if it cannot be found. */
static int own_dir(char *dir) {
    ssize_t n = readlink("/proc/self/exe", dir, PATH_MAX - 1);
    if (n <= 0) return 0;
    dir[n] = 0;
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    return 1;
}

/* o->data = FILE + ext (FILE itself if it ends in ext), o->pic = FILE + pic_ext, absolute
 * (the program may change directory before anything of it starts another program). */
static int output_paths(const char *arg, const char *ext, const char *pic_ext, output_t *o) {
    char cwd[PATH_MAX] = "";
    if (arg[0] != '/' && getcwd(cwd, sizeof cwd) == NULL) { perror("hakmem: getcwd"); return 0; }
    size_t n = strlen(arg), e = strlen(ext);
    int has_ext = n > e && strcmp(arg + n - e, ext) == 0;
    size_t base = has_ext ? n - e : n, need = strlen(cwd) + 1 + n + e + strlen(pic_ext) + 1;
    o->data = malloc(need);
    o->pic = malloc(need);
    if (o->data == NULL || o->pic == NULL) { perror("hakmem"); return 0; }
    const char *sep = cwd[0] ? "/" : "";
    snprintf(o->data, need, "%s%s%.*s%s", cwd, sep, (int)base, arg, ext);
    snprintf(o->pic, need, "%s%s%.*s%s", cwd, sep, (int)base, arg, pic_ext);
    return 1;
}

/* scripts/NAME, installed or in the build tree, into out (PATH_MAX). */
static int find_script(const char *name, char *out) {
    char dir[PATH_MAX];
    if (!own_dir(dir)) return 0;
    const char *candidates[] = { "/../share/hakmem/", "/", "/../scripts/" };
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s%s%s", dir, candidates[i], name);
        if (access(p, R_OK) == 0 && realpath(p, out) != NULL) return 1;
    }
    return 0;
}

/* Runs argv (a program that does not read stdin of ours) and waits; its status, or -1. */
static int run_and_wait(char **argv) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(EXIT_NOT_FOUND);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return st;
}

/* Draws o->pic from o->data with its script; messages say where the data is. */
static void plot(const output_t *o, const char *title) {
    struct stat sb;
    if (stat(o->data, &sb) != 0) {
        fprintf(stderr, "hakmem: no %s was written to %s (a program that does not load "
                "libhakmem.so — statically linked, set-user-ID — cannot be %s)\n",
                o->what, o->data, o->verb);
        return;
    }
    char script[PATH_MAX];
    if (!find_script(o->script, script)) {
        fprintf(stderr, "hakmem: %s in %s; %s (scripts/ in hakmem's sources) not found beside "
                "the command or in its share/hakmem/, so no picture\n", o->what, o->data, o->script);
        return;
    }
    char *args[] = { "python3", script, o->data, o->pic, "--title", (char *)title, NULL };
    int st = run_and_wait(args);
    if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        fprintf(stderr, "hakmem: %s in %s, picture in %s\n", o->what, o->data, o->pic);
    } else if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 3) {
        /* the script said which Python package is missing and how to install it */
    } else if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == EXIT_NOT_FOUND) {
        fprintf(stderr, "hakmem: %s in %s; python3 not found, so no picture (install "
                "%s, then run python3 %s %s)\n", o->what, o->data, o->packages, script, o->data);
    } else {
        fprintf(stderr, "hakmem: %s in %s; drawing it failed (python3 %s %s)\n", o->what,
                o->data, script, o->data);
    }
}

/* ---- commands ------------------------------------------------------------------------- */

/* The program's environment: the preload, --stats, --set, the trace file and the profile. */
static int program_env(const char *lib, int stats, char **envs, size_t n_envs,
                       const output_t *trace, const output_t *profile) {
    if (!set_preload(lib)) return 0;
    if (stats && setenv("HAKMEM_STATS", "1", 1) != 0) { perror("hakmem"); return 0; }
    for (size_t k = 0; k < n_envs; k++)          /* --set after --stats: it may say STATS=0 */
        if (putenv(envs[k]) != 0) { perror("hakmem"); return 0; }
    if (trace) {
        /* a trace of an enclosing program is not ours to continue (src/4-process/trace.c) */
        unsetenv("HAKMEM_TRACE_OWNER");
        if (setenv("HAKMEM_TRACE_FILE", trace->data, 1) != 0) { perror("hakmem"); return 0; }
    }
    if (profile) unsetenv("HAKMEM_PROF_OWNER");  /* (likewise: src/4-process/prof.c) */
    if (profile && (setenv("HAKMEM_PROF", "1", 1) != 0 ||
                    setenv("HAKMEM_PROF_FILE", profile->data, 1) != 0)) {
        perror("hakmem");
        return 0;
    }
    return 1;
}

static int exec_failed(const char *prog, int err) {
    fprintf(stderr, "hakmem: cannot run %s: %s\n", prog, strerror(err));
    return err == ENOENT || err == ENOTDIR ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
}

/* --trace, --profile: the program as a child, then the pictures; the program's exit status.
 * trace or profile may be NULL. */
static int run_child(char **prog, const char *lib, int stats, char **envs, size_t n_envs,
                     output_t *trace, output_t *profile) {
    if (trace) unlink(trace->data);              /* nothing stale drawn if none is written */
    if (profile) unlink(profile->data);
    int pipefd[2];                               /* the child's exec errno, if exec fails */
    if (pipe2(pipefd, O_CLOEXEC) != 0) { perror("hakmem: pipe"); return EXIT_RUN_FAILED; }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) { perror("hakmem: fork"); return EXIT_RUN_FAILED; }
    if (pid == 0) {
        close(pipefd[0]);
        int err = 0;
        if (!program_env(lib, stats, envs, n_envs, trace, profile)) err = -1;
        else { execvp(prog[0], prog); err = errno; }
        if (write(pipefd[1], &err, sizeof err) < 0) { /* the parent sees EOF */ }
        _exit(EXIT_RUN_FAILED);
    }
    close(pipefd[1]);
    struct sigaction ign = { .sa_handler = SIG_IGN }, old_int, old_quit;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    int err = 0;
    ssize_t got;
    while ((got = read(pipefd[0], &err, sizeof err)) < 0 && errno == EINTR) {}
    close(pipefd[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) { perror("hakmem: waitpid"); return EXIT_RUN_FAILED; }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    if (got == (ssize_t)sizeof err)
        return err < 0 ? EXIT_RUN_FAILED : exec_failed(prog[0], err);

    char title[256];
    size_t n = 0;
    for (char **a = prog; *a && n < sizeof title - 1; a++)
        n += (size_t)snprintf(title + n, sizeof title - n, "%s%s", a == prog ? "" : " ", *a);
    if (n >= sizeof title - 1) strcpy(title + sizeof title - 4, "...");
    if (trace) plot(trace, title);
    if (profile) plot(profile, title);

    if (WIFSIGNALED(st)) {                       /* die the way the program died */
        int sig = WTERMSIG(st);
        struct rlimit nocore = { 0, 0 };
        setrlimit(RLIMIT_CORE, &nocore);
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
        return 128 + sig;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : EXIT_RUN_FAILED;
}

static int cmd_run(int argc, char **argv) {
    int stats = 0, i = 0;
    const char *lib_arg = NULL, *trace_arg = NULL, *profile_arg = NULL;
    char **envs = calloc((size_t)argc + 1, sizeof *envs);
    size_t n_envs = 0;
    if (envs == NULL) { perror("hakmem"); return EXIT_RUN_FAILED; }

    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) { i++; break; }
        if (a[0] != '-') break;                      /* the program */
        if (strcmp(a, "--stats") == 0) {
            stats = 1;
        } else if (strcmp(a, "--set") == 0 || strncmp(a, "--set=", 6) == 0) {
            const char *v = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
            if (v == NULL) return usage_error("%s wants NAME=VALUE", a, EXIT_RUN_FAILED);
            int rc = parse_set(v, &envs[n_envs]);
            if (rc != 0) return rc;
            n_envs++;
        } else if (strcmp(a, "--lib") == 0 || strncmp(a, "--lib=", 6) == 0) {
            lib_arg = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
            if (lib_arg == NULL) return usage_error("%s wants a path", a, EXIT_RUN_FAILED);
        } else if (strcmp(a, "--trace") == 0 || strncmp(a, "--trace=", 8) == 0) {
            trace_arg = a[7] == '=' ? a + 8 : (i + 1 < argc ? argv[++i] : NULL);
            if (trace_arg == NULL || *trace_arg == 0)
                return usage_error("%s wants a file name", a, EXIT_RUN_FAILED);
        } else if (strcmp(a, "--profile") == 0 || strncmp(a, "--profile=", 10) == 0) {
            profile_arg = a[9] == '=' ? a + 10 : (i + 1 < argc ? argv[++i] : NULL);
            if (profile_arg == NULL || *profile_arg == 0)
                return usage_error("%s wants a file name", a, EXIT_RUN_FAILED);
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            return usage_error("run: unknown argument '%s'", a, EXIT_RUN_FAILED);
        }
    }
    if (i >= argc) return usage_error("run: no program given%s", "", EXIT_RUN_FAILED);

    char lib[PATH_MAX];
    if (!find_library(lib_arg, lib)) return EXIT_RUN_FAILED;
    output_t trace = { "trace", "traced", "plot_trace.py", "python3 and python3-matplotlib",
                       NULL, NULL };
    output_t profile = { "profile", "profiled", "plot_profile.py",
                         "python3, python3-matplotlib and python3-protobuf", NULL, NULL };
    if (trace_arg && !output_paths(trace_arg, ".csv", ".png", &trace)) return EXIT_RUN_FAILED;
    if (profile_arg && !output_paths(profile_arg, ".pb.gz", ".svg", &profile))
        return EXIT_RUN_FAILED;
    if (trace_arg || profile_arg)
        return run_child(argv + i, lib, stats, envs, n_envs, trace_arg ? &trace : NULL,
                         profile_arg ? &profile : NULL);
    if (!program_env(lib, stats, envs, n_envs, NULL, NULL)) return EXIT_RUN_FAILED;
    execvp(argv[i], argv + i);
    return exec_failed(argv[i], errno);
}

static int cmd_options(int argc, char **argv) {
    if (argc > 0) return usage_error("options: unexpected argument '%s'", argv[0], EXIT_USAGE);
    /* One allocation initialises hakmem here, which reads the HAKMEM_* variables (and
     * warns about bad ones), so the table shows what a program would get. */
    hak_free(hak_malloc(16));
    hak_options_print(stdout);
    fflush(stdout);
    /* HAKMEM_STATS=1 in the environment is meant for programs, not for this listing. */
    hak_option_set("STATS", "0");
    return ferror(stdout) ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0) return cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "options") == 0) return cmd_options(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("hakmem %s\n", HAKMEM_VERSION);
        return 0;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    return usage_error("unknown command '%s'", cmd, EXIT_USAGE);
}
