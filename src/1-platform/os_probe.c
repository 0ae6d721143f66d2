/* os_probe.c — what hakmem asks of the system it runs on: the address-space limit, whether
 * the host reclaims the guest's free memory, and the process's resident memory (/proc),
 * each read without malloc. */
#include "1-platform/os.h"
#include "1-platform/sys.h"

/* Whether the process's address space is limited (RLIMIT_AS): a reservation would then
 * spend what the program's own mappings may need. */
bool _hak_os_space_limited(void) { return sys_as_limited(); }

/* Whether the host takes back the guest's free memory: a virtio balloon with free page
 * reporting (feature bit 5, VIRTIO_BALLOON_F_REPORTING). The guest reports free blocks of
 * 2 MiB and more, the host discards them, and the next touch of one faults in the host
 * too — and a transparent huge page is always such a block, so each fresh one costs 512
 * host faults where a small page, from the guest's lower-order free lists, costs none.
 * Read once, lazily, without malloc (the devices are virtio0, virtio1, ...). */
bool _hak_os_host_reclaims(void) {
    static _Atomic int known;                      /* 0: not read yet, 1: no, 2: yes */
    int k = relaxed_load(&known);
    if (k != 0) return k == 2;
    static const char dir[] = "/sys/bus/virtio/drivers/virtio_balloon/virtio";
    char path[sizeof dir + 16], feat[8];
    bool yes = false;
    for (int i = 0; i < 32 && !yes; i++) {
        char *p = path + sizeof dir - 1;
        memcpy(path, dir, sizeof dir - 1);
        if (i >= 10) *p++ = (char)('0' + i / 10);
        *p++ = (char)('0' + i % 10);
        memcpy(p, "/features", sizeof "/features");
        yes = sys_read_file(path, feat, sizeof feat) && strlen(feat) >= 6 && feat[5] == '1';
    }
    relaxed_store(&known, yes ? 2 : 1);
    return yes;
}

/* What a page fault costs here, in nanoseconds: the first touch of 8 fresh pages, each
 * timed, the median of the 8 (a preemption or a timer tick lands in one, not in half of
 * them); 0 where no mapping can be had. A VM's two-level paging costs several times bare
 * metal's (2.4-2.9 us a page on this project's AMD EPYC VM, against about 0.3-1 us), and
 * the learning layer weighs refaults by it. Some 20 us of faults where they are that slow;
 * asked once, by the learner's first look at refaults (learning.c). */
uint64_t _hak_os_fault_ns(void) {
    enum { PAGES = 8 };
    char *m = sys_map_anon(NULL, PAGES * HAK_PAGE);
    if (m == NULL) return 0;
    uint64_t ns[PAGES];
    for (int i = 0; i < PAGES; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        *(volatile char *)(m + (size_t)i * HAK_PAGE) = 1;
        clock_gettime(CLOCK_MONOTONIC, &b);
        ns[i] = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u + (uint64_t)b.tv_nsec - (uint64_t)a.tv_nsec;
        for (int k = i; k > 0 && ns[k] < ns[k - 1]; k--) {         /* (kept sorted) */
            uint64_t t = ns[k]; ns[k] = ns[k - 1]; ns[k - 1] = t;
        }
    }
    sys_munmap(m, PAGES * HAK_PAGE);
    return (ns[PAGES / 2 - 1] + ns[PAGES / 2]) / 2;
}

/* The number after `key` in a /proc file (the first field's end when key is NULL), read
 * without stdio or malloc. */
static size_t proc_number(const char *path, const char *key) {
    char buf[4096];
    if (!sys_read_file(path, buf, sizeof buf)) return 0;
    const char *p = key ? strstr(buf, key) : buf;
    if (p == NULL) return 0;
    if (key) p += strlen(key);
    else while (*p && *p != ' ') p++;      /* statm: skip the first field */
    while (*p == ' ' || *p == '\t') p++;
    size_t v = 0;
    while (*p >= '0' && *p <= '9') v = v * 10 + (size_t)(*p++ - '0');
    return v;
}

size_t _hak_os_resident(size_t *peak) {
    if (peak) *peak = proc_number("/proc/self/status", "VmHWM:") * 1024;
    return proc_number("/proc/self/statm", NULL) * (size_t)sysconf(_SC_PAGESIZE);
}
