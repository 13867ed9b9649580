/* run_model: load an autosched artifact and run it from C.
 *
 *   cc -O2 -I$(python -c 'import autosched.runtime as r, os; print(os.path.dirname(r.header_path()))') \
 *      examples/run_model.c -ldl -o run_model
 *   ./run_model model.aso [INPUT.bin ...]
 *
 * Each INPUT.bin holds an input's raw bytes (numpy: x.tofile("x.bin")), in the model's input
 * order; without them the inputs are 0.5 everywhere. Each output is written to NAME.bin in the
 * current folder, and a line per output says its shape and mean. The artifact is opened with
 * dlopen, so that one program runs any model; a program for one model may instead link it
 * (cc main.c ./model.aso -Wl,-rpath,'$ORIGIN') and call the functions directly.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autosched.h"

/* the artifact's entry points, looked up by name with the header's types */
static struct {
    __typeof__(autosched_model_load) *load;
    __typeof__(autosched_model_run) *run;
    __typeof__(autosched_model_free) *free;
    __typeof__(autosched_model_num_inputs) *num_inputs;
    __typeof__(autosched_model_num_outputs) *num_outputs;
    __typeof__(autosched_model_input) *input;
    __typeof__(autosched_model_output) *output;
    __typeof__(autosched_last_error) *last_error;
} api;

static int bind(void *lib) {
#define BIND(field, symbol) if (!(api.field = (__typeof__(api.field))dlsym(lib, #symbol))) return -1;
    BIND(load, autosched_model_load) BIND(run, autosched_model_run) BIND(free, autosched_model_free)
    BIND(num_inputs, autosched_model_num_inputs) BIND(num_outputs, autosched_model_num_outputs)
    BIND(input, autosched_model_input) BIND(output, autosched_model_output)
    BIND(last_error, autosched_last_error)
    return 0;
#undef BIND
}

static int read_file(const char *path, void *into, size_t bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "run_model: cannot open %s\n", path); return -1; }
    size_t got = fread(into, 1, bytes, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != bytes || extra) {
        fprintf(stderr, "run_model: %s does not hold %zu bytes\n", path, bytes);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s MODEL.aso [INPUT.bin ...]\n", argv[0]); return 2; }
    char message[1024];
    if (autosched_artifact_check(argv[1], message, sizeof message) != 0) {
        fprintf(stderr, "run_model: %s\n", message);
        return 1;
    }
    char path[4096];   /* dlopen searches the library path for a name without a slash */
    snprintf(path, sizeof path, "%s%s", strchr(argv[1], '/') ? "" : "./", argv[1]);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib || bind(lib) != 0) {
        fprintf(stderr, "run_model: %s is not an autosched artifact: %s\n", argv[1], lib ? "no entry points" : dlerror());
        return 1;
    }
    autosched_model *model = api.load(argv[1]);
    if (!model) { fprintf(stderr, "run_model: %s\n", api.last_error()); return 1; }
    int n_in = api.num_inputs(model), n_out = api.num_outputs(model), status = 1;
    if (argc != 2 && argc != 2 + n_in) {
        fprintf(stderr, "run_model: the model takes %d inputs, got %d files\n", n_in, argc - 2);
        api.free(model);
        return 2;
    }
    void **inputs = calloc(n_in + 1, sizeof(void *)), **outputs = calloc(n_out + 1, sizeof(void *));
    for (int i = 0; i < n_in; i++) {
        const autosched_tensor_info *info = api.input(model, i);
        inputs[i] = malloc(info->bytes + 1);
        if (argc == 2) {
            if (strcmp(info->dtype, "float32") == 0)
                for (size_t k = 0; k < info->bytes / 4; k++) ((float *)inputs[i])[k] = 0.5f;
            else
                memset(inputs[i], 0, info->bytes);
        } else if (read_file(argv[2 + i], inputs[i], info->bytes) != 0) {
            goto done;
        }
    }
    for (int o = 0; o < n_out; o++) outputs[o] = malloc(api.output(model, o)->bytes + 1);
    if (api.run(model, (const void *const *)inputs, outputs) != 0) {
        fprintf(stderr, "run_model: %s\n", api.last_error());
        goto done;
    }
    for (int o = 0; o < n_out; o++) {
        const autosched_tensor_info *info = api.output(model, o);
        char path[512];   /* NAME.bin in this folder: other characters of an ONNX name (/) become _ */
        snprintf(path, sizeof path, "%s.bin", info->name);
        for (char *c = path; *c; c++)
            if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '.' || *c == '-'))
                *c = '_';
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(outputs[o], 1, info->bytes, f) != info->bytes) {
            fprintf(stderr, "run_model: cannot write %s\n", path);
            if (f) fclose(f);
            goto done;
        }
        fclose(f);
        printf("%s: %s [", info->name, info->dtype);
        for (int d = 0; d < info->ndim; d++) printf(d ? ", %lld" : "%lld", (long long)info->shape[d]);
        if (strcmp(info->dtype, "float32") == 0) {
            double sum = 0;
            for (size_t k = 0; k < info->bytes / 4; k++) sum += ((float *)outputs[o])[k];
            printf("] mean %.6g -> %s\n", sum / (double)(info->bytes / 4), path);
        } else {
            printf("] -> %s\n", path);
        }
    }
    status = 0;
done:
    for (int i = 0; i < n_in; i++) free(inputs[i]);
    for (int o = 0; o < n_out; o++) free(outputs[o]);
    free(inputs);
    free(outputs);
    api.free(model);
    return status;
}
