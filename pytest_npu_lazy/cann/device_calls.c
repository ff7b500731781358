/* Device-call recorder for pytest-npu-lazy: every CANN call the host stub or the emulated NPU
 * answers is reported here, so a test can say which device calls a phase made.
 *
 * The stub libraries and the emulation list this library in DT_NEEDED: one copy of the
 * state per process, whichever stub a call went through. Recording is off until Python
 * (pytest_npu_lazy.probe.device_calls) sets a listener; until then a call costs one branch.
 *
 * A call made by a thread that holds the GIL is handed to the listener at once, so Python
 * can read the phase and the Python line behind it. A call from a thread without the GIL
 * must not run Python: it is queued here with its CLOCK_MONOTONIC time, and Python takes the
 * queue and places it in a phase by time. Most of torch_npu's calls are of that kind: torch
 * releases the GIL around every operator. Where the calling thread is a Python thread (its
 * Python frames are frozen while it is in C), a sampler thread of Python's, started in test
 * children, reads that thread's innermost frames (sys._current_frames) while the call waits
 * for at most SAMPLE_WAIT_MS, and the queued call keeps the sample's number. A sample costs two
 * thread switches, so it is taken for the first call of each name in a sampling epoch (Python
 * starts one at every phase change): the call a failure names is a phase's or a test's first
 * of its name, and a loop of copies pays once. The wait is
 * bounded so a sampler that cannot get the GIL (its holder waits for a lock this thread holds)
 * costs one bounded wait, never a deadlock; sampling then pauses until the sampler is back.
 * Python's own symbols are looked up with dlsym, so this library links against no libpython. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef void (*npu_lazy_listener)(const char *name, long result, double stamp);

struct npu_lazy_queued_call {
    const char *name; /* a string literal of the library that answered: lives as long as the process */
    long result;
    double stamp; /* CLOCK_MONOTONIC seconds, the clock of Python's time.perf_counter on Linux */
    long thread;  /* the kernel's thread id */
    long sample;  /* the sampler's number for the Python frames behind the call; 0: none */
};

#define QUEUE_SLOTS 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static npu_lazy_listener listener;
static int (*gil_held)(void);
static int (*python_running)(void);
static void *(*python_thread_state)(void);
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
        python_thread_state = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
    }
    pthread_mutex_lock(&lock);
    listener = fn;
    queued = 0;
    dropped = 0;
    pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------ the Python line of a GIL-less call */

#define SAMPLE_WAIT_MS 500 /* a loaded 2-core machine can take 100 ms to schedule the sampler */

static pthread_mutex_t sample_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sample_cond = PTHREAD_COND_INITIALIZER;
static int sampler_waiting;         /* the sampler thread is ready for a request */
static int sampler_lost;            /* a request timed out: no new one until the sampler asks again */
static int request_state;           /* 0 none, 1 asked, 2 answered */
static unsigned long request_ident; /* the asking thread, as Python's threading.get_ident() names it */
static long request_sample;

/* Names sampled in this epoch, by address (each name is one library's string literal). */
#define SAMPLED_SLOTS 1024
static const char *sampled_names[SAMPLED_SLOTS];

/* Whether `name` is new in this epoch; it is marked sampled. Caller holds sample_lock. */
static int first_of_its_name(const char *name)
{
    size_t slot = ((uintptr_t)name >> 3) % SAMPLED_SLOTS;
    for (size_t probes = 0; probes < SAMPLED_SLOTS; probes++, slot = (slot + 1) % SAMPLED_SLOTS) {
        if (sampled_names[slot] == name)
            return 0;
        if (sampled_names[slot] == NULL) {
            sampled_names[slot] = name;
            return 1;
        }
    }
    return 0; /* full: no new sample until the next epoch */
}

/* A new epoch (a phase began): the first call of each name is sampled again. */
EXPORT void npu_lazy_new_sampling_epoch(void)
{
    pthread_mutex_lock(&sample_lock);
    memset(sampled_names, 0, sizeof sampled_names);
    pthread_mutex_unlock(&sample_lock);
}

/* The sample number of the Python frames behind this call, or 0 (not a Python thread, no sampler,
 * or not the first call of its name in this epoch). */
static long sample_python_frames(const char *name)
{
    if (python_thread_state == NULL || python_thread_state() == NULL)
        return 0;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_nsec += SAMPLE_WAIT_MS * 1000000L;
    deadline.tv_sec += deadline.tv_nsec / 1000000000L;
    deadline.tv_nsec %= 1000000000L;
    long sample = 0;
    pthread_mutex_lock(&sample_lock);
    if (sampler_waiting && !sampler_lost && request_state == 0 && first_of_its_name(name)) {
        request_state = 1;
        request_ident = (unsigned long)pthread_self();
        pthread_cond_broadcast(&sample_cond);
        int waited = 0;
        while (request_state == 1 && waited != ETIMEDOUT)
            waited = pthread_cond_timedwait(&sample_cond, &sample_lock, &deadline);
        if (request_state == 2)
            sample = request_sample;
        else
            sampler_lost = 1;
        request_state = 0;
        request_ident = 0;
    }
    pthread_mutex_unlock(&sample_lock);
    return sample;
}

/* The sampler thread (a Python thread, blocked here with the GIL released by ctypes): the next
 * thread to sample, as its threading.get_ident(); 0 once sampling stopped. */
EXPORT unsigned long npu_lazy_next_sample_request(void)
{
    pthread_mutex_lock(&sample_lock);
    sampler_waiting = 1;
    sampler_lost = 0;
    while (sampler_waiting && request_state != 1)
        pthread_cond_wait(&sample_cond, &sample_lock);
    unsigned long ident = sampler_waiting ? request_ident : 0;
    pthread_mutex_unlock(&sample_lock);
    return ident;
}

/* The sampler's answer for `ident`: the number under which Python keeps the frames it read. */
EXPORT void npu_lazy_answer_sample(unsigned long ident, long sample)
{
    pthread_mutex_lock(&sample_lock);
    if (request_state == 1 && request_ident == ident) {
        request_sample = sample;
        request_state = 2;
        pthread_cond_broadcast(&sample_cond);
    }
    pthread_mutex_unlock(&sample_lock);
}

/* Whether the sampler thread waits for requests: its starter waits for this before the test runs. */
EXPORT int npu_lazy_sampler_ready(void)
{
    pthread_mutex_lock(&sample_lock);
    int ready = sampler_waiting;
    pthread_mutex_unlock(&sample_lock);
    return ready;
}

EXPORT void npu_lazy_stop_sampler(void)
{
    pthread_mutex_lock(&sample_lock);
    sampler_waiting = 0;
    pthread_cond_broadcast(&sample_cond);
    pthread_mutex_unlock(&sample_lock);
}

/* A forked child has no sampler thread, and a lock another thread held at the fork stays held. */
static void reset_in_child(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_mutex_init(&sample_lock, NULL);
    pthread_cond_init(&sample_cond, NULL);
    sampler_waiting = 0;
    sampler_lost = 0;
    request_state = 0;
}

__attribute__((constructor)) static void register_fork_handler(void) { pthread_atfork(NULL, NULL, reset_in_child); }

/* ------------------------------------------------------------------ recording */

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
    long sample = sample_python_frames(name);
    pthread_mutex_lock(&lock);
    if (queued < QUEUE_SLOTS) {
        struct npu_lazy_queued_call *slot = &queue[queued++];
        slot->name = name;
        slot->result = result;
        slot->stamp = stamp;
        slot->thread = (long)gettid();
        slot->sample = sample;
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
