/* An owner thread that exits while a span of its own is NOTIFYING (another thread's free
 * found it full and is handing it over) waits for that notifier before its heap can be
 * reused. A notifier can be stopped for any time (descheduled, or under a debugger), so
 * the owner sleeps on a futex, not in a sched_yield loop that burns a core as long. Here
 * the test plays a notifier that stops mid-handoff: it marks one of the owner's full
 * spans NOTIFYING, lets the owner exit, checks that the owner is still waiting 300 ms
 * later having used almost no CPU, then finishes the hand-over as a notifier does; the
 * owner must then end. Runs on the hak_* API. */
#include <pthread.h>
#include <semaphore.h>
#include <time.h>

#include "internals.h"
#include "../helpers/check.h"

enum { N = 3000, SIZE = 1024 };
static void *blocks[N];
static hak_span_t *full_span;
static hak_heap_t *owner;
static sem_t parked, go;
static _Atomic int ended;
static clockid_t owner_clock;

static void *owner_main(void *arg) {
    for (int i = 0; i < N; i++) REQUIRE((blocks[i] = hak_malloc(SIZE)) != NULL);
    owner = _hak_thread_heap;
    size_t c = hak_span_of(hak_ss_of(blocks[0]), blocks[0])->cls;
    full_span = owner->bins[c].full;
    pthread_getcpuclockid(pthread_self(), &owner_clock);
    sem_post(&parked);
    sem_wait(&go);
    return arg;                                /* the key's destructor: thread exit */
}

static double cpu_ms(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void *watch(void *arg) {
    pthread_join(*(pthread_t *)arg, NULL);
    atomic_store(&ended, 1);
    return NULL;
}

int main(void) {
    pthread_t t, w;
    sem_init(&parked, 0, 0);
    sem_init(&go, 0, 0);
    REQUIRE(pthread_create(&t, NULL, owner_main, NULL) == 0);
    sem_wait(&parked);
    REQUIRE(full_span != NULL, "the owner has no full span");
    /* a notifier stops between its CAS and the end of its hand-over */
    uintptr_t v = atomic_load(&full_span->remote);
    REQUIRE((v & HAK_RS_MASK) == HAK_RS_FULL, "the span is not parked full");
    atomic_store(&full_span->remote, (v & ~(uintptr_t)HAK_RS_MASK) | HAK_RS_NOTIFYING);
    double before = cpu_ms(owner_clock);
    REQUIRE(pthread_create(&w, NULL, watch, &t) == 0);
    sem_post(&go);
    usleep(300 * 1000);
    double used = cpu_ms(owner_clock) - before;
    CHECK(!atomic_load(&ended), "the owner ended while its span was still NOTIFYING");
    CHECK(used < 60, "the waiting owner used %.0f ms of CPU in 300 ms", used);
    _hak_span_notify_push(&owner->notified, full_span);     /* the notifier goes on */
    _hak_span_notify_done(full_span);
    pthread_join(w, NULL);
    CHECK(atomic_load(&ended), "the owner did not end");
    for (int i = 0; i < N; i++) hak_free(blocks[i]);
    CHECK_DONE("unit_notify_wait");
}
