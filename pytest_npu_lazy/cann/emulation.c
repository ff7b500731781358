/* Emulated Ascend NPU for pytest-npu-lazy (--npu-lazy-cann=emulate).
 *
 * A host emulation of the ACL runtime calls torch_npu makes to discover and initialise a
 * device: one device of the model in npu_lazy_model.h, contexts, streams and events that
 * complete at once (nothing is ever queued), and "device" memory that is host memory, so
 * copies are memcpy. Nothing here computes: kernel launches, operator execution, collectives
 * and graph execution are refused by npu_lazy_emulation_refuse(), which always says so on
 * stderr and returns an error that torch_npu raises. Calls that are neither emulated nor
 * refused fail with ACL_ERROR_RT_FEATURE_NOT_SUPPORT through npu_lazy_emulation_unsupported().
 *
 * Once a call is refused the device is lost, as a real one is after an AI Core error: every
 * later synchronisation, copy, fill, launch and operator execution fails with the first
 * refusal's message, so no buffer a refused kernel should have written is ever read back as
 * if it had run (torch_npu skips later operators without calling CANN at all, so the copy
 * back is where a wrong value would otherwise escape).
 *
 * Every call is reported to the device-call recorder (device_calls.c), and
 * reports "[pid N]: name -> result" when the trace variable is set: "1" writes to
 * stderr, a path starting with "/" appends to that file (one write per line, so processes can
 * share it, and the pid tells them apart).
 *
 * The ACL signatures follow CANN's public headers (acl/acl_rt.h, acl/acl_base_rt.h). This
 * file is compiled by pytest_npu_lazy.cann.build into its own library, which every stub
 * library of the emulation lists in DT_NEEDED: one copy of the state, found by soname and by
 * dlsym() on any stub's handle. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "npu_lazy_model.h"

#define EXPORT __attribute__((visibility("default")))

typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;

enum {
    ACL_SUCCESS = 0,
    ACL_ERROR_INVALID_PARAM = 100000,
    ACL_ERROR_UNINITIALIZE = 100001,
    ACL_ERROR_REPEAT_INITIALIZE = 100002,
    ACL_ERROR_REPEAT_FINALIZE = 100037,
    ACL_ERROR_RT_PARAM_INVALID = 107000,
    ACL_ERROR_RT_INVALID_DEVICEID = 107001,
    ACL_ERROR_RT_CONTEXT_NULL = 107002,
    ACL_ERROR_RT_INVALID_HANDLE = 107017,
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000,
    ACL_ERROR_RT_MEMORY_ALLOCATION = 207001,
    ACL_ERROR_RT_MEMORY_FREE = 207002,
    ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT = 507009,
};

enum { MEMCPY_HOST_TO_HOST, MEMCPY_HOST_TO_DEVICE, MEMCPY_DEVICE_TO_HOST, MEMCPY_DEVICE_TO_DEVICE, MEMCPY_DEFAULT };

void npu_lazy_device_call(const char *name, long result); /* device_calls.c, in DT_NEEDED */

const char npu_lazy_emulation_marker[] EXPORT = "pytest-npu-lazy emulated NPU " NPU_LAZY_SOC_NAME;

/* ------------------------------------------------------------------------ trace and errors */

static int trace_fd(void)
{
    static int fd = -2;
    if (fd == -2) {
        const char *value = getenv(NPU_LAZY_TRACE_ENV);
        if (value == NULL || *value == '\0' || strcmp(value, "0") == 0)
            fd = -1;
        else if (value[0] == '/')
            fd = open(value, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        else
            fd = 2;
    }
    return fd;
}

static void write_line(int fd, const char *line)
{
    ssize_t ignored = write(fd, line, strlen(line));
    (void)ignored;
}

static void trace(const char *name, const char *result)
{
    int fd = trace_fd();
    if (fd >= 0) {
        char line[512];
        snprintf(line, sizeof line, "pytest-npu-lazy CANN emulation [pid %ld]: %s -> %s\n", (long)getpid(), name,
                 result);
        write_line(fd, line);
    }
}

static aclError done(const char *name, aclError result)
{
    npu_lazy_device_call(name, result);
    char text[24];
    snprintf(text, sizeof text, "%d", result);
    trace(name, text);
    return result;
}

static __thread char last_message[512];

/* aclGetRecentErrMsg: the message of this thread's last refused or rejected call, once. */
EXPORT const char *aclGetRecentErrMsg(void)
{
    static __thread char handed_out[512];
    npu_lazy_device_call("aclGetRecentErrMsg", 0);
    if (last_message[0] == '\0') {
        trace("aclGetRecentErrMsg", "(none)");
        return NULL;
    }
    memcpy(handed_out, last_message, sizeof handed_out);
    last_message[0] = '\0';
    trace("aclGetRecentErrMsg", handed_out);
    return handed_out;
}

static aclError reject(const char *name, aclError result, const char *why)
{
    snprintf(last_message, sizeof last_message, "pytest-npu-lazy emulated NPU: %s: %s", name, why);
    return done(name, result);
}

/* The first refusal's message once the device is lost; empty while it works. */
static char lost_reason[512];
static pthread_mutex_t lost_lock = PTHREAD_MUTEX_INITIALIZER;

/* A call that needs the device to compute: one clear line on stderr, always, and an error.
 * The first one loses the device for the rest of the process (see lost()). */
EXPORT long npu_lazy_emulation_refuse(const char *name, const char *what)
{
    char line[1024];
    npu_lazy_device_call(name, ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT);
    const char *mode = getenv(NPU_LAZY_MODE_ENV);
    if (mode != NULL && strcmp(mode, "compute") == 0)
        snprintf(last_message, sizeof last_message,
                 "the emulated NPU (" NPU_LAZY_SOC_NAME ") computes only with ATen's CPU kernels and Triton's "
                 "interpreter: %s (%s) has neither and needs a real Ascend device "
                 "(pytest-npu-lazy --npu-lazy-cann=compute)", name, what);
    else
        snprintf(last_message, sizeof last_message,
                 "the emulated NPU (" NPU_LAZY_SOC_NAME ") cannot run kernels: %s (%s) needs a real Ascend "
                 "device; only device discovery, initialisation, streams, events and memory are emulated "
                 "(pytest-npu-lazy --npu-lazy-cann=emulate)", name, what);
    pthread_mutex_lock(&lost_lock);
    if (lost_reason[0] == '\0')
        memcpy(lost_reason, last_message, sizeof lost_reason);
    pthread_mutex_unlock(&lost_lock);
    snprintf(line, sizeof line, "pytest-npu-lazy: %s\n", last_message);
    write_line(2, line);
    if (trace_fd() > 2) {
        snprintf(line, sizeof line, "pytest-npu-lazy CANN emulation [pid %ld]: %s\n", (long)getpid(), last_message);
        write_line(trace_fd(), line);
    }
    return ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT;
}

/* A call torch_npu's binaries reference that the emulation does not model: it fails with
 * `result` (ACL_ERROR_RT_FEATURE_NOT_SUPPORT, or NULL / 0 for calls that return a handle or a
 * count) and leaves the thread's error message alone, so a refusal's message survives. */
EXPORT long npu_lazy_emulation_unsupported(const char *name, long result)
{
    npu_lazy_device_call(name, result);
    char text[48];
    snprintf(text, sizeof text, "%ld (not emulated)", result);
    trace(name, text);
    return result;
}

/* The first refusal's message once the device is lost, else "": the compute mode's host kernels ask it
 * before each operator, so nothing computes on a lost device there either. */
EXPORT const char *npu_lazy_emulation_lost_reason(void)
{
    static __thread char copy[512];
    pthread_mutex_lock(&lost_lock);
    memcpy(copy, lost_reason, sizeof copy);
    pthread_mutex_unlock(&lost_lock);
    return copy;
}

/* Whether the device is lost; if so, this call fails with the first refusal's message, as every
 * call that needs the device does on a real NPU after a kernel error, until the process ends. */
static int lost(const char *name, aclError *result)
{
    char reason[512];
    pthread_mutex_lock(&lost_lock);
    memcpy(reason, lost_reason, sizeof reason);
    pthread_mutex_unlock(&lost_lock);
    if (reason[0] == '\0')
        return 0;
    char line[1024];
    snprintf(last_message, sizeof last_message, "the emulated NPU is lost since an earlier refused call, so %s fails "
             "too (a real device is lost the same way after a kernel error); the first refusal: %.300s", name, reason);
    static int said; /* on stderr once: the message also reaches torch_npu's error through aclGetRecentErrMsg */
    if (!said) {
        said = 1;
        snprintf(line, sizeof line, "pytest-npu-lazy: %s\n", last_message);
        write_line(2, line);
    }
    *result = done(name, ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT);
    return 1;
}

/* ------------------------------------------------------------------------ state */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised;
static size_t allocated_bytes;
static int next_stream_id = 1;
static __thread int current_device = -1;
static int primary_active; /* aclrtSetDevice on some thread made the primary context active */

#define BLOCK_HEADER 512 /* keeps every device pointer 512-byte aligned, as torch_npu expects */

/* Contexts, streams and events are handles on one list of live objects: a destroyed or
 * foreign handle is told apart without reading freed memory. */
enum kind { CONTEXT = 1, STREAM, EVENT };
struct handle { int kind; struct handle *next; };
struct context { struct handle h; int device; };
struct stream { struct handle h; int id; };
struct event { struct handle h; uint32_t flags; int recorded; uint64_t stamp_ns; };
struct block { uint32_t host; size_t size; struct block *next; };

static struct context primary_context = {{CONTEXT, NULL}, 0};
static __thread struct context *current_context;
static struct handle *handles;
static struct block *blocks;

static void *new_handle(int kind, size_t size)
{
    struct handle *h = calloc(1, size);
    if (h != NULL) {
        h->kind = kind;
        pthread_mutex_lock(&lock);
        h->next = handles;
        handles = h;
        pthread_mutex_unlock(&lock);
    }
    return h;
}

static int is_live(const void *pointer, int kind)
{
    if (pointer == &primary_context)
        return kind == CONTEXT;
    int found = 0;
    pthread_mutex_lock(&lock);
    for (struct handle *h = handles; h != NULL && !found; h = h->next)
        found = h == pointer && h->kind == kind;
    pthread_mutex_unlock(&lock);
    return found;
}

/* Unlink and free a live handle of this kind; 0 if it was not one. */
static int drop_handle(void *pointer, int kind)
{
    struct handle *found = NULL;
    pthread_mutex_lock(&lock);
    for (struct handle **link = &handles; *link != NULL; link = &(*link)->next) {
        if (*link == pointer && (*link)->kind == kind) {
            found = *link;
            *link = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    free(found);
    return found != NULL;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int valid_device(int32_t device) { return device >= 0 && device < NPU_LAZY_DEVICE_COUNT; }
static int valid_stream(aclrtStream s) { return s == NULL || is_live(s, STREAM); } /* NULL: the default stream */
static int valid_event(aclrtEvent e) { return is_live(e, EVENT); }

/* ------------------------------------------------------------------------ init and devices */

EXPORT aclError aclInit(const char *config_path)
{
    (void)config_path;
    pthread_mutex_lock(&lock);
    int again = initialised;
    initialised = 1;
    pthread_mutex_unlock(&lock);
    return done("aclInit", again ? ACL_ERROR_REPEAT_INITIALIZE : ACL_SUCCESS);
}

EXPORT aclError aclFinalize(void)
{
    pthread_mutex_lock(&lock);
    int was = initialised;
    initialised = 0;
    pthread_mutex_unlock(&lock);
    return done("aclFinalize", was ? ACL_SUCCESS : ACL_ERROR_REPEAT_FINALIZE);
}

EXPORT aclError aclrtGetDeviceCount(uint32_t *count)
{
    if (count == NULL)
        return reject("aclrtGetDeviceCount", ACL_ERROR_INVALID_PARAM, "count is NULL");
    *count = NPU_LAZY_DEVICE_COUNT;
    return done("aclrtGetDeviceCount", ACL_SUCCESS);
}

/* torch_npu's task queue: its device start creates the default stream (on the caller's thread, which runs
 * Python) and then starts the queue's thread, a thread that runs no Python, whose first act is aclrtSetDevice.
 * On a device the first copy waits for that thread (the copy is a task it runs); the compute mode's host
 * kernels compute on the caller's thread, and a phase can end before the thread has run at all. So the
 * emulation says where the queue stands (npu_lazy_emulation_queue_state: 0 no stream made by Python code yet,
 * 1 made and the queue's thread has not set the device, 2 it has), and pytest_npu_lazy.cann.task_queue waits
 * on it at phase ends and after host kernels. */
static int stream_made_by_python;
static int queue_bound;

/* 1: this thread runs no Python (a C++ thread of torch_npu's); 0: it is a Python thread (holding the GIL or
 * not); -1: unknown (Python is not running, or its symbols are not found). */
static int thread_without_python(void)
{
    static int (*python_running)(void);
    static void *(*thread_state)(void);
    static int looked_up;
    if (!__atomic_load_n(&looked_up, __ATOMIC_ACQUIRE)) {
        python_running = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
        thread_state = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
        __atomic_store_n(&looked_up, 1, __ATOMIC_RELEASE);
    }
    if (python_running == NULL || thread_state == NULL || !python_running())
        return -1;
    return thread_state() == NULL;
}

EXPORT int npu_lazy_emulation_queue_state(void)
{
    if (__atomic_load_n(&queue_bound, __ATOMIC_ACQUIRE))
        return 2;
    return __atomic_load_n(&stream_made_by_python, __ATOMIC_ACQUIRE) ? 1 : 0;
}

EXPORT aclError aclrtSetDevice(int32_t device)
{
    if (!valid_device(device))
        return reject("aclrtSetDevice", ACL_ERROR_RT_INVALID_DEVICEID, "the emulated NPU has device 0 only");
    current_device = device;
    current_context = &primary_context;
    primary_active = 1;
    aclError result = done("aclrtSetDevice", ACL_SUCCESS); /* recorded (and stamped) before it is said bound */
    if (thread_without_python() == 1)
        __atomic_store_n(&queue_bound, 1, __ATOMIC_RELEASE);
    return result;
}

EXPORT aclError aclrtGetDevice(int32_t *device)
{
    if (device == NULL)
        return reject("aclrtGetDevice", ACL_ERROR_INVALID_PARAM, "device is NULL");
    if (current_device < 0) /* torch_npu asks this to learn whether a device is set: no message */
        return done("aclrtGetDevice", ACL_ERROR_RT_CONTEXT_NULL);
    *device = current_device;
    return done("aclrtGetDevice", ACL_SUCCESS);
}

EXPORT aclError aclrtResetDevice(int32_t device)
{
    if (!valid_device(device))
        return reject("aclrtResetDevice", ACL_ERROR_RT_INVALID_DEVICEID, "the emulated NPU has device 0 only");
    if (current_device == device) {
        current_device = -1;
        current_context = NULL;
    }
    primary_active = 0;
    return done("aclrtResetDevice", ACL_SUCCESS);
}

/* torch_npu 2.13.0 asks this in MaybeSetDevice, seen with TORCH_NPU_USE_COMPATIBLE_IMPL=1: from _npu_init and
 * from NpuSysCtrl::Finalize at shutdown. Absent, its lookup throws (TORCH_CHECK), and at shutdown the throw ends
 * the process with std::terminate (SIGABRT, exit 134). Active once a device is set, until it is reset; flags 0. */
EXPORT aclError aclrtGetPrimaryCtxState(int32_t device, uint32_t *flags, int32_t *active)
{
    if (!valid_device(device))
        return reject("aclrtGetPrimaryCtxState", ACL_ERROR_RT_INVALID_DEVICEID, "the emulated NPU has device 0 only");
    if (flags != NULL)
        *flags = 0;
    if (active != NULL)
        *active = primary_active;
    return done("aclrtGetPrimaryCtxState", ACL_SUCCESS);
}

EXPORT aclError aclrtSynchronizeDevice(void)
{
    aclError result;
    if (lost("aclrtSynchronizeDevice", &result))
        return result;
    return done("aclrtSynchronizeDevice", ACL_SUCCESS);
}

EXPORT aclError aclrtSynchronizeDeviceWithTimeout(int32_t timeout)
{
    (void)timeout;
    aclError result;
    if (lost("aclrtSynchronizeDeviceWithTimeout", &result))
        return result;
    return done("aclrtSynchronizeDeviceWithTimeout", ACL_SUCCESS);
}

EXPORT const char *aclrtGetSocName(void)
{
    npu_lazy_device_call("aclrtGetSocName", 0);
    trace("aclrtGetSocName", NPU_LAZY_SOC_NAME);
    return NPU_LAZY_SOC_NAME;
}

/* aclDeviceInfo: 0 AI (cube) cores, 1 vector cores, 2 L2 bytes. */
EXPORT aclError aclGetDeviceCapability(uint32_t device, int info, int64_t *value)
{
    static const int64_t values[] = {NPU_LAZY_CUBE_CORES, NPU_LAZY_VECTOR_CORES, NPU_LAZY_L2_BYTES};
    if (!valid_device((int32_t)device) || value == NULL || info < 0 || info > 2)
        return reject("aclGetDeviceCapability", ACL_ERROR_INVALID_PARAM, "bad device, info type or NULL value");
    *value = values[info];
    return done("aclGetDeviceCapability", ACL_SUCCESS);
}

/* aclrtDevAttr: the attributes whose values the model documents; others are not emulated. */
EXPORT aclError aclrtGetDeviceInfo(uint32_t device, int attr, int64_t *value)
{
    int64_t answer;
    switch (attr) {
    case 101: case 102: answer = NPU_LAZY_CUBE_CORES; break;   /* AI cores, cube cores */
    case 201: answer = NPU_LAZY_VECTOR_CORES; break;
    case 301: answer = (int64_t)NPU_LAZY_HBM_BYTES; break;     /* total global memory */
    case 302: answer = NPU_LAZY_L2_BYTES; break;
    default: return npu_lazy_emulation_unsupported("aclrtGetDeviceInfo", ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    }
    if (!valid_device((int32_t)device) || value == NULL)
        return reject("aclrtGetDeviceInfo", ACL_ERROR_INVALID_PARAM, "bad device or NULL value");
    *value = answer;
    return done("aclrtGetDeviceInfo", ACL_SUCCESS);
}

EXPORT aclError aclrtGetMemInfo(int attr, size_t *free_bytes, size_t *total_bytes)
{
    (void)attr;
    if (free_bytes == NULL || total_bytes == NULL)
        return reject("aclrtGetMemInfo", ACL_ERROR_INVALID_PARAM, "NULL output");
    pthread_mutex_lock(&lock);
    *total_bytes = (size_t)NPU_LAZY_HBM_BYTES;
    *free_bytes = (size_t)NPU_LAZY_HBM_BYTES - allocated_bytes;
    pthread_mutex_unlock(&lock);
    return done("aclrtGetMemInfo", ACL_SUCCESS);
}

EXPORT aclError aclrtDeviceCanAccessPeer(int32_t *can_access, int32_t device, int32_t peer)
{
    if (can_access == NULL || !valid_device(device))
        return reject("aclrtDeviceCanAccessPeer", ACL_ERROR_INVALID_PARAM, "bad device or NULL output");
    *can_access = 0;
    (void)peer;
    return done("aclrtDeviceCanAccessPeer", ACL_SUCCESS);
}

/* Settings that only matter while kernels run: accepted and ignored. */
#define ACCEPT(name, params) EXPORT aclError name params { return done(#name, ACL_SUCCESS); }
ACCEPT(aclrtSetDeviceSatMode, (int mode))
ACCEPT(aclrtSetOpExecuteTimeOut, (uint32_t timeout))
ACCEPT(aclrtSetOpWaitTimeout, (uint32_t timeout))

EXPORT aclError aclrtGetVersion(int32_t *major, int32_t *minor, int32_t *patch)
{
    if (major == NULL || minor == NULL || patch == NULL)
        return reject("aclrtGetVersion", ACL_ERROR_INVALID_PARAM, "NULL output");
    *major = NPU_LAZY_ACL_MAJOR;
    *minor = NPU_LAZY_ACL_MINOR;
    *patch = NPU_LAZY_ACL_PATCH;
    return done("aclrtGetVersion", ACL_SUCCESS);
}

/* ------------------------------------------------------------------------ contexts */

EXPORT aclError aclrtCreateContext(aclrtContext *context, int32_t device)
{
    if (context == NULL || !valid_device(device))
        return reject("aclrtCreateContext", ACL_ERROR_INVALID_PARAM, "bad device or NULL output");
    struct context *created = new_handle(CONTEXT, sizeof *created);
    if (created == NULL)
        return done("aclrtCreateContext", ACL_ERROR_RT_MEMORY_ALLOCATION);
    created->device = device;
    *context = created;
    current_context = created;
    current_device = device;
    return done("aclrtCreateContext", ACL_SUCCESS);
}

EXPORT aclError aclrtDestroyContext(aclrtContext context)
{
    if (current_context == context)
        current_context = NULL;
    if (!drop_handle(context, CONTEXT))
        return reject("aclrtDestroyContext", ACL_ERROR_RT_INVALID_HANDLE, "not a context made by aclrtCreateContext");
    return done("aclrtDestroyContext", ACL_SUCCESS);
}

EXPORT aclError aclrtSetCurrentContext(aclrtContext context)
{
    if (!is_live(context, CONTEXT))
        return reject("aclrtSetCurrentContext", ACL_ERROR_RT_INVALID_HANDLE, "not a context");
    current_context = context;
    current_device = current_context->device;
    return done("aclrtSetCurrentContext", ACL_SUCCESS);
}

EXPORT aclError aclrtGetCurrentContext(aclrtContext *context)
{
    if (context == NULL)
        return reject("aclrtGetCurrentContext", ACL_ERROR_INVALID_PARAM, "NULL output");
    if (current_context == NULL)
        return reject("aclrtGetCurrentContext", ACL_ERROR_RT_CONTEXT_NULL, "no context on this thread");
    *context = current_context;
    return done("aclrtGetCurrentContext", ACL_SUCCESS);
}

/* ------------------------------------------------------------------------ streams */

static aclError create_stream(const char *name, aclrtStream *stream)
{
    if (stream == NULL)
        return reject(name, ACL_ERROR_INVALID_PARAM, "NULL output");
    struct stream *created = new_handle(STREAM, sizeof *created);
    if (created == NULL)
        return done(name, ACL_ERROR_RT_MEMORY_ALLOCATION);
    pthread_mutex_lock(&lock);
    created->id = next_stream_id++;
    pthread_mutex_unlock(&lock);
    *stream = created;
    return done(name, ACL_SUCCESS);
}

EXPORT aclError aclrtCreateStream(aclrtStream *stream) { return create_stream("aclrtCreateStream", stream); }

EXPORT aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag)
{
    (void)priority;
    (void)flag;
    aclError result = create_stream("aclrtCreateStreamWithConfig", stream);
    if (result == ACL_SUCCESS && thread_without_python() == 0) /* torch_npu's default stream: its queue follows */
        __atomic_store_n(&stream_made_by_python, 1, __ATOMIC_RELEASE);
    return result;
}

static aclError destroy_stream(const char *name, aclrtStream stream)
{
    if (!drop_handle(stream, STREAM))
        return reject(name, ACL_ERROR_RT_INVALID_HANDLE, "not a live stream");
    return done(name, ACL_SUCCESS);
}

EXPORT aclError aclrtDestroyStream(aclrtStream stream) { return destroy_stream("aclrtDestroyStream", stream); }
EXPORT aclError aclrtDestroyStreamForce(aclrtStream stream) { return destroy_stream("aclrtDestroyStreamForce", stream); }

/* Nothing is ever queued on an emulated stream, so waiting on one returns at once. */
#define STREAM_CALL(name, params, stream_arg) \
    EXPORT aclError name params \
    { \
        if (!valid_stream(stream_arg)) \
            return reject(#name, ACL_ERROR_RT_INVALID_HANDLE, "not a stream"); \
        return done(#name, ACL_SUCCESS); \
    }
/* Waiting on a stream of a lost device fails, as on a real one. */
#define SYNC_CALL(name, params, stream_arg) \
    EXPORT aclError name params \
    { \
        aclError result; \
        if (!valid_stream(stream_arg)) \
            return reject(#name, ACL_ERROR_RT_INVALID_HANDLE, "not a stream"); \
        if (lost(#name, &result)) \
            return result; \
        return done(#name, ACL_SUCCESS); \
    }
SYNC_CALL(aclrtSynchronizeStream, (aclrtStream stream), stream)
SYNC_CALL(aclrtSynchronizeStreamWithTimeout, (aclrtStream stream, int32_t timeout), stream)
STREAM_CALL(aclrtSetStreamFailureMode, (aclrtStream stream, uint64_t mode), stream)
STREAM_CALL(aclrtSetStreamOverflowSwitch, (aclrtStream stream, uint32_t flag), stream)

EXPORT aclError aclrtStreamQuery(aclrtStream stream, int *status)
{
    if (!valid_stream(stream) || status == NULL)
        return reject("aclrtStreamQuery", ACL_ERROR_INVALID_PARAM, "not a stream, or NULL output");
    *status = 0; /* ACL_STREAM_STATUS_COMPLETE */
    return done("aclrtStreamQuery", ACL_SUCCESS);
}

EXPORT aclError aclrtGetStreamOverflowSwitch(aclrtStream stream, uint32_t *flag)
{
    if (!valid_stream(stream) || flag == NULL)
        return reject("aclrtGetStreamOverflowSwitch", ACL_ERROR_INVALID_PARAM, "not a stream, or NULL output");
    *flag = 0;
    return done("aclrtGetStreamOverflowSwitch", ACL_SUCCESS);
}

EXPORT aclError aclrtStreamGetId(aclrtStream stream, int32_t *id)
{
    if (!valid_stream(stream) || id == NULL)
        return reject("aclrtStreamGetId", ACL_ERROR_INVALID_PARAM, "not a stream, or NULL output");
    *id = stream == NULL ? 0 : ((struct stream *)stream)->id;
    return done("aclrtStreamGetId", ACL_SUCCESS);
}

EXPORT aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event)
{
    if (!valid_stream(stream) || !valid_event(event))
        return reject("aclrtStreamWaitEvent", ACL_ERROR_RT_INVALID_HANDLE, "not a stream or not an event");
    return done("aclrtStreamWaitEvent", ACL_SUCCESS);
}

/* ------------------------------------------------------------------------ events */

static aclError create_event(const char *name, aclrtEvent *event, uint32_t flags)
{
    if (event == NULL)
        return reject(name, ACL_ERROR_INVALID_PARAM, "NULL output");
    struct event *created = new_handle(EVENT, sizeof *created);
    if (created == NULL)
        return done(name, ACL_ERROR_RT_MEMORY_ALLOCATION);
    created->flags = flags;
    *event = created;
    return done(name, ACL_SUCCESS);
}

EXPORT aclError aclrtCreateEvent(aclrtEvent *event) { return create_event("aclrtCreateEvent", event, 0); }
EXPORT aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag)
{
    return create_event("aclrtCreateEventWithFlag", event, flag);
}
EXPORT aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag)
{
    return create_event("aclrtCreateEventExWithFlag", event, flag);
}

EXPORT aclError aclrtDestroyEvent(aclrtEvent event)
{
    if (!drop_handle(event, EVENT))
        return reject("aclrtDestroyEvent", ACL_ERROR_RT_INVALID_HANDLE, "not a live event");
    return done("aclrtDestroyEvent", ACL_SUCCESS);
}

/* An event completes when recorded: the host clock stamps it, so elapsed time is host time. */
EXPORT aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)
{
    if (!valid_event(event) || !valid_stream(stream))
        return reject("aclrtRecordEvent", ACL_ERROR_RT_INVALID_HANDLE, "not an event or not a stream");
    ((struct event *)event)->recorded = 1;
    ((struct event *)event)->stamp_ns = now_ns();
    return done("aclrtRecordEvent", ACL_SUCCESS);
}

EXPORT aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream)
{
    if (!valid_event(event) || !valid_stream(stream))
        return reject("aclrtResetEvent", ACL_ERROR_RT_INVALID_HANDLE, "not an event or not a stream");
    ((struct event *)event)->recorded = 0;
    return done("aclrtResetEvent", ACL_SUCCESS);
}

EXPORT aclError aclrtSynchronizeEvent(aclrtEvent event)
{
    if (!valid_event(event))
        return reject("aclrtSynchronizeEvent", ACL_ERROR_RT_INVALID_HANDLE, "not an event");
    aclError result;
    if (lost("aclrtSynchronizeEvent", &result))
        return result;
    return done("aclrtSynchronizeEvent", ACL_SUCCESS);
}

/* aclrtEventStatus: 0 complete. aclrtEventRecordedStatus: 1 complete, 0 not yet recorded. */
EXPORT aclError aclrtQueryEvent(aclrtEvent event, int *status)
{
    if (!valid_event(event) || status == NULL)
        return reject("aclrtQueryEvent", ACL_ERROR_INVALID_PARAM, "not an event, or NULL output");
    *status = 0;
    return done("aclrtQueryEvent", ACL_SUCCESS);
}

EXPORT aclError aclrtQueryEventStatus(aclrtEvent event, int *status)
{
    if (!valid_event(event) || status == NULL)
        return reject("aclrtQueryEventStatus", ACL_ERROR_INVALID_PARAM, "not an event, or NULL output");
    *status = ((struct event *)event)->recorded ? 1 : 0;
    return done("aclrtQueryEventStatus", ACL_SUCCESS);
}

EXPORT aclError aclrtQueryEventWaitStatus(aclrtEvent event, int *status)
{
    if (!valid_event(event) || status == NULL)
        return reject("aclrtQueryEventWaitStatus", ACL_ERROR_INVALID_PARAM, "not an event, or NULL output");
    *status = 0; /* ACL_EVENT_WAIT_STATUS_COMPLETE */
    return done("aclrtQueryEventWaitStatus", ACL_SUCCESS);
}

EXPORT aclError aclrtEventElapsedTime(float *ms, aclrtEvent start, aclrtEvent end)
{
    if (ms == NULL || !valid_event(start) || !valid_event(end))
        return reject("aclrtEventElapsedTime", ACL_ERROR_INVALID_PARAM, "not events, or NULL output");
    struct event *a = start, *b = end;
    if (!a->recorded || !b->recorded)
        return reject("aclrtEventElapsedTime", ACL_ERROR_INVALID_PARAM, "an event was not recorded");
    *ms = (float)((double)(int64_t)(b->stamp_ns - a->stamp_ns) / 1e6);
    return done("aclrtEventElapsedTime", ACL_SUCCESS);
}

EXPORT aclError aclrtEventGetTimestamp(aclrtEvent event, uint64_t *timestamp)
{
    if (!valid_event(event) || timestamp == NULL)
        return reject("aclrtEventGetTimestamp", ACL_ERROR_INVALID_PARAM, "not an event, or NULL output");
    *timestamp = ((struct event *)event)->stamp_ns;
    return done("aclrtEventGetTimestamp", ACL_SUCCESS);
}

/* ------------------------------------------------------------------------ memory */

/* Host memory with a header in front; the list of live blocks tells device pointers from others. */
static aclError allocate(const char *name, void **out, size_t size, int host)
{
    if (out == NULL || size == 0)
        return reject(name, ACL_ERROR_INVALID_PARAM, "NULL output or zero size");
    pthread_mutex_lock(&lock);
    int over = !host && size > (size_t)NPU_LAZY_HBM_BYTES - allocated_bytes;
    pthread_mutex_unlock(&lock);
    void *raw = NULL;
    if (over || size > SIZE_MAX - BLOCK_HEADER || posix_memalign(&raw, BLOCK_HEADER, size + BLOCK_HEADER) != 0)
        return reject(name, ACL_ERROR_RT_MEMORY_ALLOCATION, over ? "out of emulated device memory" : "host malloc failed");
    struct block *b = raw;
    b->host = (uint32_t)host;
    b->size = size;
    pthread_mutex_lock(&lock);
    b->next = blocks;
    blocks = b;
    if (!host)
        allocated_bytes += size;
    pthread_mutex_unlock(&lock);
    *out = (char *)raw + BLOCK_HEADER;
    return done(name, ACL_SUCCESS);
}

static aclError release(const char *name, void *pointer, int host)
{
    pthread_mutex_lock(&lock);
    struct block **link = &blocks;
    while (*link != NULL && ((char *)*link + BLOCK_HEADER != (char *)pointer || (*link)->host != (uint32_t)host))
        link = &(*link)->next;
    struct block *b = *link;
    if (b != NULL) {
        *link = b->next;
        if (!host)
            allocated_bytes -= b->size;
    }
    pthread_mutex_unlock(&lock);
    if (b == NULL)
        return reject(name, ACL_ERROR_RT_MEMORY_FREE, host ? "not a pointer from aclrtMallocHost"
                                                           : "not a live pointer from aclrtMalloc");
    free(b);
    return done(name, ACL_SUCCESS);
}

EXPORT aclError aclrtMalloc(void **pointer, size_t size, int policy)
{
    (void)policy;
    return allocate("aclrtMalloc", pointer, size, 0);
}

EXPORT aclError aclrtMallocAlign32(void **pointer, size_t size, int policy)
{
    (void)policy;
    return allocate("aclrtMallocAlign32", pointer, size, 0);
}

EXPORT aclError aclrtFree(void *pointer) { return release("aclrtFree", pointer, 0); }
EXPORT aclError aclrtMallocHost(void **pointer, size_t size) { return allocate("aclrtMallocHost", pointer, size, 1); }
EXPORT aclError aclrtFreeHost(void *pointer) { return release("aclrtFreeHost", pointer, 1); }

/* Whether [pointer, pointer + count) lies inside one live emulated device allocation. */
static int on_device(const void *pointer, size_t count)
{
    int inside = 0;
    pthread_mutex_lock(&lock);
    for (struct block *b = blocks; b != NULL && !inside; b = b->next) {
        const char *start = (const char *)b + BLOCK_HEADER;
        inside = !b->host && (const char *)pointer >= start && count <= b->size
                 && (size_t)((const char *)pointer - start) <= b->size - count;
    }
    pthread_mutex_unlock(&lock);
    return inside;
}

static aclError copy(const char *name, void *dst, size_t dst_max, const void *src, size_t count, int kind)
{
    aclError result;
    if (kind != MEMCPY_HOST_TO_HOST && lost(name, &result))
        return result;
    if ((dst == NULL || src == NULL) && count > 0)
        return reject(name, ACL_ERROR_INVALID_PARAM, "NULL address");
    if (count > dst_max)
        return reject(name, ACL_ERROR_INVALID_PARAM, "count is larger than destMax");
    int dst_device = kind == MEMCPY_HOST_TO_DEVICE || kind == MEMCPY_DEVICE_TO_DEVICE;
    int src_device = kind == MEMCPY_DEVICE_TO_HOST || kind == MEMCPY_DEVICE_TO_DEVICE;
    if (kind < MEMCPY_HOST_TO_HOST || kind > MEMCPY_DEFAULT)
        return reject(name, ACL_ERROR_INVALID_PARAM, "unknown aclrtMemcpyKind");
    if (count > 0 && ((dst_device && !on_device(dst, count)) || (src_device && !on_device(src, count))))
        return reject(name, ACL_ERROR_INVALID_PARAM, "a device address is not inside memory from aclrtMalloc");
    if (count > 0)
        memmove(dst, src, count);
    return done(name, ACL_SUCCESS);
}

EXPORT aclError aclrtMemcpy(void *dst, size_t dst_max, const void *src, size_t count, int kind)
{
    return copy("aclrtMemcpy", dst, dst_max, src, count, kind);
}

EXPORT aclError aclrtMemcpyAsync(void *dst, size_t dst_max, const void *src, size_t count, int kind, aclrtStream stream)
{
    if (!valid_stream(stream))
        return reject("aclrtMemcpyAsync", ACL_ERROR_RT_INVALID_HANDLE, "not a stream");
    return copy("aclrtMemcpyAsync", dst, dst_max, src, count, kind);
}

static aclError fill(const char *name, void *pointer, size_t max_count, int32_t value, size_t count)
{
    aclError result;
    if (lost(name, &result))
        return result;
    if (pointer == NULL || count > max_count)
        return reject(name, ACL_ERROR_INVALID_PARAM, "NULL address or count larger than maxCount");
    memset(pointer, value, count);
    return done(name, ACL_SUCCESS);
}

EXPORT aclError aclrtMemset(void *pointer, size_t max_count, int32_t value, size_t count)
{
    return fill("aclrtMemset", pointer, max_count, value, count);
}

EXPORT aclError aclrtMemsetAsync(void *pointer, size_t max_count, int32_t value, size_t count, aclrtStream stream)
{
    if (!valid_stream(stream))
        return reject("aclrtMemsetAsync", ACL_ERROR_RT_INVALID_HANDLE, "not a stream");
    return fill("aclrtMemsetAsync", pointer, max_count, value, count);
}

/* ------------------------------------------------------------------------ operator compile options */

/* Host-side settings torch_npu writes and reads back while it initialises: kept, never used. */
#define OPTION_SLOTS 64
static char *compile_options[OPTION_SLOTS];

EXPORT aclError aclSetCompileopt(int option, const char *value)
{
    if (option < 0 || option >= OPTION_SLOTS || value == NULL)
        return reject("aclSetCompileopt", ACL_ERROR_INVALID_PARAM, "unknown option or NULL value");
    char *copy_of_value = strdup(value);
    if (copy_of_value == NULL)
        return done("aclSetCompileopt", ACL_ERROR_RT_MEMORY_ALLOCATION);
    pthread_mutex_lock(&lock);
    free(compile_options[option]);
    compile_options[option] = copy_of_value;
    pthread_mutex_unlock(&lock);
    return done("aclSetCompileopt", ACL_SUCCESS);
}

/* Returns a size, not an aclError: the bytes aclGetCompileopt needs, "" for an option never set. */
EXPORT size_t aclGetCompileoptSize(int option)
{
    size_t size = 1;
    pthread_mutex_lock(&lock);
    if (option >= 0 && option < OPTION_SLOTS && compile_options[option] != NULL)
        size = strlen(compile_options[option]) + 1;
    pthread_mutex_unlock(&lock);
    char text[24];
    snprintf(text, sizeof text, "%zu", size);
    npu_lazy_device_call("aclGetCompileoptSize", (long)size);
    trace("aclGetCompileoptSize", text);
    return size;
}

EXPORT aclError aclGetCompileopt(int option, char *value, size_t length)
{
    if (option < 0 || option >= OPTION_SLOTS || value == NULL || length == 0)
        return reject("aclGetCompileopt", ACL_ERROR_INVALID_PARAM, "unknown option, NULL value or zero length");
    pthread_mutex_lock(&lock);
    const char *stored = compile_options[option] != NULL ? compile_options[option] : "";
    int fits = strlen(stored) < length;
    if (fits)
        strcpy(value, stored);
    pthread_mutex_unlock(&lock);
    if (!fits)
        return reject("aclGetCompileopt", ACL_ERROR_INVALID_PARAM, "length is too small for the value");
    return done("aclGetCompileopt", ACL_SUCCESS);
}

ACCEPT(aclopSetCompileFlag, (int flag))

/* HcclSetConfig(HcclConfig, HcclConfigValue): a setting (deterministic reduction), sent when a
 * stream applies the deterministic level; collectives themselves are refused. */
ACCEPT(HcclSetConfig, (int config, int32_t value))

/* aclSysParamOpt values (deterministic computing and the like): process- and context-wide
 * settings of the runtime, 0 until set, as on a fresh device. One store serves both scopes. */
static int64_t system_params[OPTION_SLOTS];

static aclError get_param(const char *name, int option, int64_t *value)
{
    if (option < 0 || option >= OPTION_SLOTS || value == NULL)
        return reject(name, ACL_ERROR_INVALID_PARAM, "unknown option or NULL value");
    pthread_mutex_lock(&lock);
    *value = system_params[option];
    pthread_mutex_unlock(&lock);
    return done(name, ACL_SUCCESS);
}

static aclError set_param(const char *name, int option, int64_t value)
{
    if (option < 0 || option >= OPTION_SLOTS)
        return reject(name, ACL_ERROR_INVALID_PARAM, "unknown option");
    pthread_mutex_lock(&lock);
    system_params[option] = value;
    pthread_mutex_unlock(&lock);
    return done(name, ACL_SUCCESS);
}

EXPORT aclError aclrtGetSysParamOpt(int option, int64_t *value) { return get_param("aclrtGetSysParamOpt", option, value); }
EXPORT aclError aclrtSetSysParamOpt(int option, int64_t value) { return set_param("aclrtSetSysParamOpt", option, value); }
EXPORT aclError aclrtCtxGetSysParamOpt(int option, int64_t *value)
{
    return get_param("aclrtCtxGetSysParamOpt", option, value);
}
EXPORT aclError aclrtCtxSetSysParamOpt(int option, int64_t value)
{
    return set_param("aclrtCtxSetSysParamOpt", option, value);
}

/* ------------------------------------------------------------------------ errors and versions */

#define NO_ERROR(name) EXPORT aclError name(int level) { (void)level; return done(#name, ACL_SUCCESS); }
NO_ERROR(aclrtGetLastError)
NO_ERROR(aclrtPeekAtLastError)

/* aclCANNPackageVersion: version[128], major/minor/release/patch[64] each, reserved[128]. */
EXPORT aclError aclsysGetCANNVersion(int package, char *version)
{
    if (version == NULL || package < 0 || package > 7)
        return reject("aclsysGetCANNVersion", ACL_ERROR_INVALID_PARAM, "bad package name or NULL output");
    memset(version, 0, 128 + 4 * 64 + 128);
    snprintf(version, 128, "%s", NPU_LAZY_CANN_VERSION);
    snprintf(version + 128, 64, "%d", NPU_LAZY_ACL_MAJOR);
    snprintf(version + 192, 64, "%d", NPU_LAZY_ACL_MINOR);
    snprintf(version + 256, 64, "%d", NPU_LAZY_ACL_PATCH);
    return done("aclsysGetCANNVersion", ACL_SUCCESS);
}

EXPORT aclError aclsysGetVersionStr(char *package, char *version)
{
    if (package == NULL || version == NULL)
        return reject("aclsysGetVersionStr", ACL_ERROR_INVALID_PARAM, "NULL argument");
    snprintf(version, 128, "%s", NPU_LAZY_CANN_VERSION);
    return done("aclsysGetVersionStr", ACL_SUCCESS);
}
