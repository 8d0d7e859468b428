/* libFuzzer target for the .npy reader: every input goes through the header parser (and, when
 * accepted and followed by enough data, the conversion to row-major host elements) and through
 * the file reader, from an in-memory file. Seeds: tests/fuzz_corpus/npy/.
 *
 *   fuzz_npy -max_total_time=60 tests/fuzz_corpus/npy */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"
#include "eagle/checkpoint.h"
#include "io/checkpoint_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_npy: invariant failed: %s\n", #cond);                            \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

static void parse_and_convert(const uint8_t *data, size_t size) {
    eg_clear_error();
    eg__npy_header h;
    eg_status status = eg__npy_parse_header(data, size, "fuzz.npy", &h);
    if (status != EG_OK) {
        FUZZ_CHECK(status == EG_ERR_FORMAT || status == EG_ERR_UNSUPPORTED);
        FUZZ_CHECK(eg_last_status() == status);
        FUZZ_CHECK(strncmp(eg_last_error(), "fuzz.npy: ", 10) == 0);
        return;
    }
    FUZZ_CHECK(h.n_dims >= 0 && h.n_dims <= EG_MAX_DIMS);
    FUZZ_CHECK(h.header_bytes <= size && h.header_bytes <= 12 + EG__NPY_MAX_HEADER);
    FUZZ_CHECK(h.elem_size == eg_dtype_size(h.dtype));
    size_t product = 1;
    for (int i = 0; i < h.n_dims; i++) product *= (size_t)h.shape[i];
    FUZZ_CHECK(product == h.n_elems);
    FUZZ_CHECK(h.data_bytes == h.n_elems * h.elem_size);
    /* Convert whatever data the input holds, when it is enough (trailing bytes ignored here). */
    if (size - h.header_bytes < h.data_bytes) return;
    uint8_t *out = malloc(h.data_bytes + 1);
    FUZZ_CHECK(out != NULL);
    eg__npy_convert(&h, data + h.header_bytes, out);
    if (h.dtype == EG_DTYPE_BOOL)
        for (size_t i = 0; i < h.n_elems; i++) FUZZ_CHECK(out[i] <= 1);
    free(out);
}

static void read_file(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz_npy", MFD_CLOEXEC);
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
    eg_tensor *t = eg_npy_read(path);
    if (t) {
        FUZZ_CHECK(eg_last_status() == EG_OK);
        FUZZ_CHECK((size_t)eg_tensor_n_elems(t) * eg_dtype_size(eg_tensor_dtype(t)) <= size);
        eg_release(t);
    } else {
        eg_status status = eg_last_status();
        FUZZ_CHECK(status == EG_ERR_FORMAT || status == EG_ERR_UNSUPPORTED ||
                   status == EG_ERR_OUT_OF_MEMORY);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse_and_convert(data, size);
    read_file(data, size);
    eg_clear_error();
    return 0;
}
