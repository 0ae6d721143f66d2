/* hakmem.c — the whole library as one translation unit, so the compiler sees every fast
 * path together and the exported malloc symbols can be aliases (override.c). Each module
 * stays its own file; this one only includes them, lowest layer first. */
#include "options.c"
#include "diag.c"
#include "os.c"
#include "registry.c"
#include "size_class.c"
#include "superslab.c"
#include "check.c"
#include "span.c"
#include "heap.c"
#include "huge.c"
#include "purge_thread.c"
#include "alloc.c"
#include "stats.c"
#include "init.c"
#include "override.c"
