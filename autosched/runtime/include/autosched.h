/* autosched.h: run a model compiled by `autosched compile` (an .aso artifact) from C.
 *
 * The artifact is a shared library: these functions are in it. Link the program with the
 * artifact (cc main.c ./model.aso -Wl,-rpath,'$ORIGIN') or dlopen it and look them up, then
 * call autosched_model_load with the artifact's path (its weights are read from there, or mapped with AUTOSCHED_WEIGHTS=map).
 *
 * Threads: a model runs one call at a time (a call waits for the one in progress); different
 * models, or several loads of one artifact, run at the same time from different threads.
 * Each run uses an OpenMP team of autosched_model_set_num_threads threads (default: OpenMP's,
 * OMP_NUM_THREADS or one per core). How long idle OpenMP threads spin is libgomp's, read once
 * when it loads: GOMP_SPINCOUNT or OMP_WAIT_POLICY in the environment.
 */
#ifndef AUTOSCHED_H
#define AUTOSCHED_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct autosched_model autosched_model;

/* An input or output of the model: dtype is numpy's name ("float32"), shape row-major. */
typedef struct {
    const char *name;
    const char *dtype;
    int ndim;
    const int64_t *shape;
    size_t bytes;
} autosched_tensor_info;

/* Load the artifact at path (the file this library was loaded from, or a copy of it): checks
 * that it is complete and this library's, that this CPU has the instruction-set extensions the
 * code uses, maps the weights and allocates the working memory. NULL on failure: see
 * autosched_last_error. */
autosched_model *autosched_model_load(const char *path);

/* Run the model: inputs[i] points to input i's bytes, outputs[i] to room for output i's
 * (autosched_model_input/output say their sizes). 0 on success, else non-zero with a message
 * in autosched_last_error. The arrays are copied in and out: the caller keeps them. */
int autosched_model_run(autosched_model *model, const void *const *inputs, void *const *outputs);

/* Release the model's memory and mapping (NULL is ignored). */
void autosched_model_free(autosched_model *model);

/* The OpenMP team size of the model's runs; 0 (the default) leaves OpenMP's. */
int autosched_model_set_num_threads(autosched_model *model, int num_threads);

int autosched_model_num_inputs(const autosched_model *model);
int autosched_model_num_outputs(const autosched_model *model);
/* NULL for an index out of range */
const autosched_tensor_info *autosched_model_input(const autosched_model *model, int index);
const autosched_tensor_info *autosched_model_output(const autosched_model *model, int index);

/* The message of this thread's last failed call ("" if none). */
const char *autosched_last_error(void);

/* Check, before dlopen, that the file at path is a complete artifact of the format these
 * functions read (the dynamic loader itself would crash on a truncated library): 0 if so, else
 * -1 with the reason in message. A program linked with the artifact is loaded before main. */
static inline int autosched_artifact_check(const char *path, char *message, size_t size) {
    unsigned char t[72];
    long end = -1;
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(message, size, "cannot open %s", path); return -1; }
    int complete = fseek(f, 0, SEEK_END) == 0 && (end = ftell(f)) >= 72 && fseek(f, end - 72, SEEK_SET) == 0 &&
                   fread(t, 1, 72, f) == 72 && memcmp(t, "ASOTRAIL", 8) == 0;
    fclose(f);
    if (!complete) {
        snprintf(message, size, "%s is not a complete autosched artifact (no trailer at its end: truncated, "
                 "or another kind of file)", path);
        return -1;
    }
    uint64_t v[5];
    for (int k = 0; k < 5; k++) {
        v[k] = 0;
        for (int b = 7; b >= 0; b--) v[k] = (v[k] << 8) | t[16 + 8 * k + b];
    }
    uint64_t body = (uint64_t)end - 72;   /* library, weights offset, weights bytes, manifest offset, bytes */
    if (t[8] != 1 || t[9] || t[10] || t[11]) {
        snprintf(message, size, "%s is an artifact of another format than 1", path);
        return -1;
    }
    if (v[0] > v[1] || v[1] > body || v[2] > body - v[1] || v[3] > body || v[4] > body - v[3]) {
        snprintf(message, size, "%s is damaged: its sections do not fit in the file", path);
        return -1;
    }
    return 0;
}

#ifdef __cplusplus
}
#endif
#endif
