/* Device-call recorder for pytest-npu-lazy: every CANN call the host stub or the emulated NPU
 * answers is reported here, so a test can say which device calls a phase made.
 *
 * The stub libraries and the emulation list this library in DT_NEEDED: one copy of the
 * state per process, whichever stub a call went through. Recording is off until Python
 * (pytest_npu_lazy.probe.device_calls) sets a listener; until then a call costs one branch.
 *
 * A call made by a thread that holds the GIL is handed to the listener at once, so Python
 * can read the phase and the Python line behind it. A call from a thread without the GIL
 * (torch_npu's task-queue thread, a C++ worker) must not run Python: it is queued here with
 * its CLOCK_MONOTONIC time, and Python takes the queue and places it in a phase by time.
 * Python's own symbols are looked up with dlsym, so this library links against no libpython. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef void (*npu_lazy_listener)(const char *name, long result, double stamp);

struct npu_lazy_queued_call {
    const char *name; /* a string literal of the library that answered: lives as long as the process */
    long result;
    double stamp; /* CLOCK_MONOTONIC seconds, the clock of Python's time.perf_counter on Linux */
    long thread;  /* the kernel's thread id */
};

#define QUEUE_SLOTS 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static npu_lazy_listener listener;
static int (*gil_held)(void);
static int (*python_running)(void);
static struct npu_lazy_queued_call queue[QUEUE_SLOTS];
static size_t queued;
static size_t dropped;

static double monotonic_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const char npu_lazy_device_call_recorder[] EXPORT = "pytest-npu-lazy device-call recorder";

/* Start (a listener) or stop (NULL) recording in this process; forked children inherit it. */
EXPORT void npu_lazy_set_device_call_listener(npu_lazy_listener fn)
{
    if (gil_held == NULL) {
        gil_held = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Check");
        python_running = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    }
    pthread_mutex_lock(&lock);
    listener = fn;
    queued = 0;
    dropped = 0;
    pthread_mutex_unlock(&lock);
}

/* Called by every stub and emulated function with the result it returns. */
EXPORT void npu_lazy_device_call(const char *name, long result)
{
    npu_lazy_listener fn = listener;
    if (fn == NULL)
        return;
    double stamp = monotonic_seconds();
    if (gil_held != NULL && python_running != NULL && python_running() && gil_held()) {
        fn(name, result, stamp);
        return;
    }
    pthread_mutex_lock(&lock);
    if (queued < QUEUE_SLOTS) {
        struct npu_lazy_queued_call *slot = &queue[queued++];
        slot->name = name;
        slot->result = result;
        slot->stamp = stamp;
        slot->thread = (long)gettid();
    } else {
        dropped++;
    }
    pthread_mutex_unlock(&lock);
}

/* Move up to `capacity` queued calls into `out`, oldest first; returns how many. */
EXPORT size_t npu_lazy_take_queued_device_calls(struct npu_lazy_queued_call *out, size_t capacity)
{
    pthread_mutex_lock(&lock);
    size_t taken = queued < capacity ? queued : capacity;
    for (size_t i = 0; i < taken; i++)
        out[i] = queue[i];
    for (size_t i = taken; i < queued; i++)
        queue[i - taken] = queue[i];
    queued -= taken;
    pthread_mutex_unlock(&lock);
    return taken;
}

/* Calls lost because the queue was full since recording started: a report must say so. */
EXPORT size_t npu_lazy_dropped_device_calls(void) { return dropped; }
