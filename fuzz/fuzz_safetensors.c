/* libFuzzer target for the safetensors reader and its JSON parser: every input goes through the
 * JSON parser on its own, through the in-memory reader (and, when accepted, every tensor is read
 * and checked against its header entry) and through the file reader, from an in-memory file.
 * Seeds: tests/fuzz_corpus/safetensors/.
 *
 *   fuzz_safetensors -max_total_time=60 tests/fuzz_corpus/safetensors */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"
#include "eagle/checkpoint.h"
#include "io/checkpoint_internal.h"
#include "io/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A violated invariant is a bug in the library, so it must crash loudly here. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_safetensors: invariant failed: %s\n", #cond);                    \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

static void check_json(const eg__json *value, int depth) {
    FUZZ_CHECK(depth <= EG__JSON_MAX_DEPTH);
    if (value->type == EG__JSON_STRING || value->type == EG__JSON_NUMBER) {
        FUZZ_CHECK(value->string != NULL && value->string[value->length] == '\0');
        size_t n = value->length;
        FUZZ_CHECK(eg__utf8_check((const uint8_t *)value->string, n) == n);
    }
    if (value->type == EG__JSON_ARRAY || value->type == EG__JSON_OBJECT)
        for (size_t i = 0; i < value->length; i++) check_json(&value->items[i], depth + 1);
}

static void parse_json(const uint8_t *data, size_t size) {
    eg__json value;
    char message[128];
    bool oom = false;
    if (eg__json_parse((const char *)data, size, &value, message, sizeof message, &oom)) {
        check_json(&value, 0);
        eg__json_free(&value);
    } else {
        FUZZ_CHECK(message[0] != '\0');
        FUZZ_CHECK(value.items == NULL && value.string == NULL);
    }
}

/* Every accepted handle must be fully readable and self-consistent. */
static void check_handle(eg_safetensors *st) {
    int n = eg_safetensors_count(st);
    FUZZ_CHECK(n >= 0);
    for (int i = 0; i < n; i++) {
        const char *name = eg_safetensors_name(st, i);
        FUZZ_CHECK(name != NULL);
        FUZZ_CHECK(eg_safetensors_contains(st, name));
        eg_dtype dtype;
        int n_dims;
        int64_t shape[EG_MAX_DIMS];
        eg_status status = eg_safetensors_info(st, name, &dtype, &n_dims, shape);
        eg_tensor *t = eg_safetensors_get(st, name);
        if (status != EG_OK) {
            FUZZ_CHECK(status == EG_ERR_UNSUPPORTED && t == NULL);
            eg_clear_error();
            continue;
        }
        FUZZ_CHECK(t != NULL);
        FUZZ_CHECK(eg_tensor_dtype(t) == dtype && eg_tensor_n_dims(t) == n_dims);
        for (int d = 0; d < n_dims; d++) FUZZ_CHECK(eg_tensor_shape(t)[d] == shape[d]);
        if (dtype == EG_DTYPE_BOOL) {
            const uint8_t *b = eg_tensor_n_elems(t) ? eg_tensor_data(t) : NULL;
            for (int64_t k = 0; k < eg_tensor_n_elems(t); k++) FUZZ_CHECK(b[k] <= 1);
        }
        eg_release(t);
    }
    for (int i = 0; i < eg_safetensors_metadata_count(st); i++) {
        const char *key = eg_safetensors_metadata_key(st, i);
        FUZZ_CHECK(key != NULL && eg_safetensors_metadata(st, key) != NULL);
    }
    FUZZ_CHECK(eg_last_status() == EG_OK);
}

static void open_memory(const uint8_t *data, size_t size) {
    eg_clear_error();
    eg_safetensors *st = NULL;
    eg_status status = eg__safetensors_open_memory(data, size, "fuzz.safetensors", &st);
    if (status != EG_OK) {
        FUZZ_CHECK(st == NULL);
        FUZZ_CHECK(status == EG_ERR_FORMAT || status == EG_ERR_OUT_OF_MEMORY);
        FUZZ_CHECK(eg_last_status() == status);
        FUZZ_CHECK(strncmp(eg_last_error(), "fuzz.safetensors: ", 18) == 0);
        return;
    }
    check_handle(st);
    eg_safetensors_close(st);
}

static void open_file(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz_safetensors", MFD_CLOEXEC);
    if (fd < 0) return;
    size_t written = 0;
    while (written < size) {
        ssize_t n = write(fd, data + written, size - written);
        if (n <= 0) break;
        written += (size_t)n;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    eg_clear_error();
    eg_safetensors *st = eg_safetensors_open(path);
    if (st) {
        check_handle(st);
        eg_safetensors_close(st);
    } else {
        FUZZ_CHECK(eg_last_status() == EG_ERR_FORMAT || eg_last_status() == EG_ERR_OUT_OF_MEMORY);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse_json(data, size);
    if (size >= 8) parse_json(data + 8, size - 8);
    open_memory(data, size);
    open_file(data, size);
    eg_clear_error();
    return 0;
}
