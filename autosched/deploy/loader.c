/* The network driver and loader of an autosched artifact (see autosched/runtime/include/autosched.h).
 *
 * Compiled with the model's generated plan (plan.h: the kernels, each call's arguments, the
 * arena and weight offsets, the inputs and outputs) into the artifact's shared library. It
 * does natively what autosched.graph.GraphExecutor does: one arena planned by liveness,
 * weights already packed in the layout the kernels read (read from the artifact file, or mapped with AUTOSCHED_WEIGHTS=map),
 * every kernel's argument vector prepared once at load, and a run that calls the kernels in
 * order with no allocation and no checks between them.
 *
 * File layout (all little-endian): [shared library][padding to a page][weights][manifest JSON]
 * [trailer: "ASOTRAIL", u32 format, u32 0, u64 library bytes, u64 weights offset, u64 weights
 * bytes, u64 manifest offset, u64 manifest bytes, 16-byte build id].
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autosched.h"
#include "plan.h"

int omp_get_max_threads(void);
void omp_set_num_threads(int);

#define ASO_TRAILER_BYTES 72

enum { ASO_ARENA = 0, ASO_WEIGHTS = 1, ASO_SLOT = 2 };

/* Memory of the model's own: from big_alloc, with the length to give back (0: malloc's). */
typedef struct {
    char *at;
    size_t mapped;
} aso_memory;

struct autosched_model {
    pthread_mutex_t lock;
    aso_memory weights;     /* read from the file, or mapped (AUTOSCHED_WEIGHTS=map) */
    aso_memory arena;
    aso_memory slots[ASO_N_SLOTS];
    void **argv_memory;     /* every call's argument vector, one after another */
    void **argvs[ASO_N_CALLS];
    int num_threads;
};

static __thread char last_error[1024];

static void set_error(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof last_error, format, args);
    va_end(args);
}

const char *autosched_last_error(void) { return last_error; }

static uint64_t read_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t read_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The instruction-set extensions (as /proc/cpuinfo names them) that this CPU lacks, or "". */
static void missing_cpu_flags(char *missing, size_t size) {
    missing[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;   /* not Linux: nothing to check against */
    static __thread char line[16384];   /* loads run without the GIL, in parallel */
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) { found = 1; break; }
    fclose(f);
    if (!found) return;
    line[strcspn(line, "\n")] = ' ';
    for (int i = 0; ASO_CPU_FLAGS[i]; i++) {
        char want[64];
        snprintf(want, sizeof want, " %s ", ASO_CPU_FLAGS[i]);
        if (!strstr(line, want)) {
            size_t n = strlen(missing);
            snprintf(missing + n, size - n, "%s%s", n ? ", " : "", ASO_CPU_FLAGS[i]);
        }
    }
}

#define ASO_HUGE_PAGE ((size_t)2 << 20)

/* bytes of memory, 64-byte aligned. From 4 MiB on (as numpy's large arrays, which the
 * in-tuner executor uses) it is anonymous memory on 2 MiB boundaries that the kernel may back
 * with huge pages: streaming ResNet-50's 100 MB of weights through 4 KiB pages costs a TLB
 * miss a page, and made it run at half the executor's speed. */
static aso_memory big_alloc(size_t bytes) {
    aso_memory m = {NULL, 0};
    if (bytes < 2 * ASO_HUGE_PAGE) {
        m.at = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
        return m;
    }
    size_t keep = (bytes + ASO_HUGE_PAGE - 1) / ASO_HUGE_PAGE * ASO_HUGE_PAGE, len = keep + ASO_HUGE_PAGE;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return m;
    char *at = (char *)(((uintptr_t)p + ASO_HUGE_PAGE - 1) & ~(uintptr_t)(ASO_HUGE_PAGE - 1));
    if (at > p) munmap(p, (size_t)(at - p));
    if (p + len > at + keep) munmap(at + keep, (size_t)(p + len - (at + keep)));
    madvise(at, keep, MADV_HUGEPAGE);
    m.at = at;
    m.mapped = keep;
    return m;
}

static void big_free(aso_memory m) {
    if (m.mapped) munmap(m.at, m.mapped);
    else free(m.at);
}

/* The weights of the artifact open as fd: read into memory of the model's own, or mapped
 * from the file (AUTOSCHED_WEIGHTS=map: processes that load one artifact then share them,
 * at the cost of 4 KiB pages). */
static int load_weights(autosched_model *model, int fd, uint64_t offset, uint64_t bytes, const char *path) {
    if (!bytes) return 0;
    const char *how = getenv("AUTOSCHED_WEIGHTS");
    if (how && strcmp(how, "map") == 0) {
        void *at = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, (off_t)offset);
        if (at == MAP_FAILED) { set_error("cannot map the weights of %s: %s", path, strerror(errno)); return -1; }
        madvise(at, bytes, MADV_WILLNEED);
        model->weights.at = at;
        model->weights.mapped = bytes;
        return 0;
    }
    model->weights = big_alloc(bytes);
    if (!model->weights.at) { set_error("out of memory: the weights of %s take %llu bytes", path,
                                        (unsigned long long)bytes); return -1; }
    for (uint64_t done = 0; done < bytes;) {
        ssize_t got = pread(fd, model->weights.at + done, bytes - done, (off_t)(offset + done));
        if (got <= 0) {
            set_error("cannot read the weights of %s: %s", path, got < 0 ? strerror(errno) : "the file is shorter");
            return -1;
        }
        done += (uint64_t)got;
    }
    return 0;
}

/* Check the artifact at path (autosched.h) and that it is this library's; load its weights. */
static int map_weights(autosched_model *model, const char *path) {
    if (autosched_artifact_check(path, last_error, sizeof last_error) != 0) return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    unsigned char t[ASO_TRAILER_BYTES];
    if (fd < 0 || fstat(fd, &st) != 0 ||
        pread(fd, t, sizeof t, st.st_size - ASO_TRAILER_BYTES) != (ssize_t)sizeof t) {
        set_error("cannot read the artifact %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    uint64_t w_off = read_u64(t + 24), w_bytes = read_u64(t + 32);
    int ok = 0;
    if (read_u32(t + 8) != ASO_FORMAT) {
        set_error("%s is an artifact of format %u; this library reads format %u", path, read_u32(t + 8), ASO_FORMAT);
    } else if (memcmp(t + 56, ASO_BUILD_ID, 16) != 0) {
        set_error("%s is another model's artifact than the library it is loaded with (build ids differ)", path);
    } else if (w_bytes != ASO_WEIGHTS_BYTES || w_off % 4096 != 0) {
        set_error("%s is damaged: its weights are not where this library expects them", path);
    } else {
        ok = load_weights(model, fd, w_off, w_bytes, path) == 0;
    }
    close(fd);
    return ok ? 0 : -1;
}

autosched_model *autosched_model_load(const char *path) {
    if (!path) { set_error("autosched_model_load: path is NULL"); return NULL; }
    char missing[1024];
    missing_cpu_flags(missing, sizeof missing);
    if (missing[0]) {
        set_error("this CPU lacks instruction-set extensions the model's code uses: %s (compiled for %s)",
                  missing, ASO_CPU_NAME);
        return NULL;
    }
    autosched_model *model = calloc(1, sizeof *model);
    if (!model) { set_error("out of memory"); return NULL; }
    pthread_mutex_init(&model->lock, NULL);
    if (map_weights(model, path) != 0) { autosched_model_free(model); return NULL; }
    model->arena = big_alloc(ASO_ARENA_BYTES);
    int failed = model->arena.at == NULL;
    for (int s = 0; s < ASO_N_SLOTS; s++) {
        model->slots[s] = big_alloc(ASO_SLOT_BYTES[s]);
        failed |= model->slots[s].at == NULL;
    }
    model->argv_memory = calloc(ASO_N_ARGS + 1, sizeof(void *));
    if (failed || !model->argv_memory) {
        autosched_model_free(model);
        set_error("out of memory: the model needs %llu bytes of working memory", (unsigned long long)ASO_ARENA_BYTES);
        return NULL;
    }
    for (int c = 0; c < ASO_N_CALLS; c++) {
        model->argvs[c] = model->argv_memory + ASO_CALL_ARGS[c];
        for (uint32_t a = ASO_CALL_ARGS[c]; a < ASO_CALL_ARGS[c + 1]; a++) {
            uint64_t at = ASO_ARG_AT[a];
            model->argv_memory[a] = ASO_ARG_KIND[a] == ASO_ARENA ? (void *)(model->arena.at + at)
                                  : ASO_ARG_KIND[a] == ASO_WEIGHTS ? (void *)(model->weights.at + at)
                                  : (void *)model->slots[at].at;
        }
    }
    return model;
}

void autosched_model_free(autosched_model *model) {
    if (!model) return;
    big_free(model->weights);
    big_free(model->arena);
    for (int s = 0; s < ASO_N_SLOTS; s++) big_free(model->slots[s]);
    free(model->argv_memory);
    pthread_mutex_destroy(&model->lock);
    free(model);
}

int autosched_model_set_num_threads(autosched_model *model, int num_threads) {
    if (!model || num_threads < 0) { set_error("autosched_model_set_num_threads: bad arguments"); return -1; }
    model->num_threads = num_threads;
    return 0;
}

int autosched_model_run(autosched_model *model, const void *const *inputs, void *const *outputs) {
    if (!model || (!inputs && ASO_N_INPUTS) || (!outputs && ASO_N_OUTPUTS)) {
        set_error("autosched_model_run: the model, inputs or outputs is NULL");
        return -1;
    }
    pthread_mutex_lock(&model->lock);
    for (int i = 0; i < ASO_N_INPUTS; i++)
        memcpy(model->slots[ASO_INPUT_SLOT[i]].at, inputs[i], ASO_INPUTS[i].bytes);
    int previous = omp_get_max_threads();
    if (model->num_threads > 0) omp_set_num_threads(model->num_threads);
    int status = 0, c = 0;
    for (; c < ASO_N_CALLS; c++) {
        status = ASO_FUNCTIONS[c](model->argvs[c]);
        if (status) break;
    }
    if (model->num_threads > 0) omp_set_num_threads(previous);
    if (status) {
        const char *message = ASO_ERRORS[c](status);
        set_error("kernel %d of the model (%s) failed: %s", c, ASO_CALL_NAMES[c], message ? message : "unknown error");
    } else {
        for (int o = 0; o < ASO_N_OUTPUTS; o++)
            memcpy(outputs[o], model->slots[ASO_OUTPUT_SLOT[o]].at, ASO_OUTPUTS[o].bytes);
    }
    pthread_mutex_unlock(&model->lock);
    return status;
}

int autosched_model_num_inputs(const autosched_model *model) { return model ? ASO_N_INPUTS : 0; }
int autosched_model_num_outputs(const autosched_model *model) { return model ? ASO_N_OUTPUTS : 0; }

const autosched_tensor_info *autosched_model_input(const autosched_model *model, int index) {
    return model && index >= 0 && index < ASO_N_INPUTS ? &ASO_INPUTS[index] : NULL;
}

const autosched_tensor_info *autosched_model_output(const autosched_model *model, int index) {
    return model && index >= 0 && index < ASO_N_OUTPUTS ? &ASO_OUTPUTS[index] : NULL;
}
