/* hakmem.c — the whole library as one translation unit, so the compiler sees every fast
 * path together and the exported malloc symbols can be aliases (override.c). Each module
 * stays its own file that also compiles alone (make check-layers); this one only includes
 * them, lowest layer first (docs/ARCHITECTURE.md, "Layers"). */
#include "diag.c"
#include "options.c"
#include "counters.c"
#include "learned.c"
#include "os.c"
#include "registry.c"
#include "size_class.c"
#include "superslab.c"
#include "check.c"
#include "span.c"
#include "heap.c"
#include "huge.c"
#include "purge_thread.c"
#include "policy.c"
#include "stats.c"
#include "init.c"
#include "trace.c"
#include "alloc.c"
#include "override.c"
#include "override_cxx.c"
