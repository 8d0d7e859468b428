/* The C side of the interoperability test with the reference readers (tests/interop/run.sh):
 * writes safetensors and .npy files for the Python scripts to check, and checks the files they
 * write with safetensors.numpy.save_file and numpy.save. Both sides build the same tensors from
 * the table below (mirrored in tests/interop/spec.py).
 *
 *   eagle_interop write-safetensors DIR   -> DIR/eagle.safetensors, DIR/eagle_bf16.safetensors
 *   eagle_interop check-safetensors DIR   <- DIR/python.safetensors
 *   eagle_interop write-npy DIR           -> DIR/eagle_<name>.npy
 *   eagle_interop check-npy DIR           <- DIR/python_<name>.npy, python_fortran.npy, ...
 *
 * Exit status 0 when everything matched; otherwise 1 with the reasons on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"

typedef struct spec {
    const char *name;
    eg_dtype dtype;
    int n_dims;
    int64_t shape[2];
} spec;

/* Values (flat row-major index i): f32 0.5 i - 1.25, f64 i / 3 - 1, f16 0.25 i - 0.5,
 * bf16 2 i - 3, i32 1000003 i - 2000000, i64 3e12 i - 1, u8 60 i, bool i even, scalar 3.25,
 * transposed: arange(12).reshape(3, 4).T as i32. */
static const spec specs[] = {
    {"f32", EG_DTYPE_F32, 2, {2, 3}},        {"f64", EG_DTYPE_F64, 1, {4, 0}},
    {"f16", EG_DTYPE_F16, 2, {3, 2}},        {"bf16", EG_DTYPE_BF16, 2, {2, 2}},
    {"i32", EG_DTYPE_I32, 1, {5, 0}},        {"i64", EG_DTYPE_I64, 1, {3, 0}},
    {"u8", EG_DTYPE_U8, 2, {2, 2}},          {"bool", EG_DTYPE_BOOL, 1, {3, 0}},
    {"scalar", EG_DTYPE_F32, 0, {0, 0}},     {"empty", EG_DTYPE_F32, 2, {0, 3}},
    {"transposed", EG_DTYPE_I32, 2, {4, 3}},
};
#define N_SPECS ((int)(sizeof specs / sizeof specs[0]))

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "eagle_interop: " __VA_ARGS__);                                        \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static eg_tensor *make(const spec *s) {
    if (strcmp(s->name, "transposed") == 0) {
        eg_tensor *base = eg_arange(0, 12, 1, EG_DTYPE_I32);
        eg_tensor *matrix = eg_reshape(base, 2, (int64_t[]){3, 4});
        eg_tensor *t = eg_transpose(matrix, 0, 1); /* a non-contiguous view */
        eg_release(base);
        eg_release(matrix);
        return t;
    }
    eg_tensor *t = eg_empty(s->dtype, s->n_dims, s->shape);
    if (!t) return NULL;
    int64_t n = eg_tensor_n_elems(t);
    void *data = n ? eg_tensor_data(t) : NULL;
    for (int64_t i = 0; i < n; i++) {
        double x = (double)i;
        switch (s->dtype) {
        case EG_DTYPE_F32:
            ((float *)data)[i] = s->n_dims == 0 ? 3.25f : (float)(0.5 * x - 1.25);
            break;
        case EG_DTYPE_F64:
            ((double *)data)[i] = x / 3.0 - 1.0;
            break;
        case EG_DTYPE_F16: {
            float v = (float)(0.25 * x - 0.5);
            eg_f32_to_f16(&v, (uint16_t *)data + i, 1);
            break;
        }
        case EG_DTYPE_BF16: {
            float v = (float)(2.0 * x - 3.0);
            eg_f32_to_bf16(&v, (uint16_t *)data + i, 1);
            break;
        }
        case EG_DTYPE_I32:
            ((int32_t *)data)[i] = (int32_t)(1000003 * i - 2000000);
            break;
        case EG_DTYPE_I64:
            ((int64_t *)data)[i] = 3000000000000 * i - 1;
            break;
        case EG_DTYPE_U8:
            ((uint8_t *)data)[i] = (uint8_t)(60 * i);
            break;
        case EG_DTYPE_BOOL:
            ((uint8_t *)data)[i] = i % 2 == 0;
            break;
        default:
            break;
        }
    }
    return t;
}

static const spec *find_spec(const char *name) {
    for (int i = 0; i < N_SPECS; i++)
        if (strcmp(specs[i].name, name) == 0) return &specs[i];
    return NULL;
}

/* Compares t (read from file `what`; may be NULL) with the spec's tensor, byte for byte, then
 * releases t. */
static void compare(const char *what, const spec *s, eg_tensor *t) {
    if (!t) {
        CHECK(0, "%s: %s: not read: %s", what, s->name, eg_last_error());
        eg_clear_error();
        return;
    }
    eg_tensor *expected = make(s);
    CHECK(eg_tensor_dtype(t) == eg_tensor_dtype(expected), "%s: %s: dtype %s, expected %s", what,
          s->name, eg_dtype_name(eg_tensor_dtype(t)), eg_dtype_name(eg_tensor_dtype(expected)));
    char a[64], b[64];
    eg_tensor_shape_string(t, a, sizeof a);
    eg_tensor_shape_string(expected, b, sizeof b);
    CHECK(strcmp(a, b) == 0, "%s: %s: shape %s, expected %s", what, s->name, a, b);
    if (eg_tensor_dtype(t) == eg_tensor_dtype(expected) && strcmp(a, b) == 0) {
        size_t n = (size_t)eg_tensor_n_elems(t) * eg_dtype_size(eg_tensor_dtype(t));
        uint8_t *x = malloc(n + 1), *y = malloc(n + 1);
        eg_tensor_copy_to_host(t, x, n);
        eg_tensor_copy_to_host(expected, y, n);
        CHECK(memcmp(x, y, n) == 0, "%s: %s: values differ", what, s->name);
        free(x);
        free(y);
    }
    eg_release(expected);
    eg_release(t);
}

static void path_in(char *out, size_t size, const char *dir, const char *name) {
    snprintf(out, size, "%s/%s", dir, name);
}

static void write_safetensors(const char *dir) {
    /* safetensors.numpy cannot represent bfloat16, so bf16 goes to a file of its own. */
    const char *names[N_SPECS];
    eg_tensor *tensors[N_SPECS];
    int n = 0;
    for (int i = 0; i < N_SPECS; i++)
        if (specs[i].dtype != EG_DTYPE_BF16) {
            names[n] = specs[i].name;
            tensors[n++] = make(&specs[i]);
        }
    const char *keys[] = {"source"}, *values[] = {"eagle interop \xe2\x9c\x93"};
    char path[4096];
    path_in(path, sizeof path, dir, "eagle.safetensors");
    CHECK(eg_safetensors_save(path, n, names, tensors, 1, keys, values) == EG_OK, "%s",
          eg_last_error());
    for (int i = 0; i < n; i++) eg_release(tensors[i]);

    const char *bf16_name = "bf16";
    eg_tensor *bf16 = make(find_spec("bf16"));
    path_in(path, sizeof path, dir, "eagle_bf16.safetensors");
    CHECK(eg_safetensors_save(path, 1, &bf16_name, &bf16, 0, NULL, NULL) == EG_OK, "%s",
          eg_last_error());
    eg_release(bf16);
}

static void check_safetensors(const char *dir) {
    char path[4096];
    path_in(path, sizeof path, dir, "python.safetensors");
    eg_safetensors *st = eg_safetensors_open(path);
    if (!st) {
        CHECK(0, "%s", eg_last_error());
        return;
    }
    int expected_count = 0;
    for (int i = 0; i < N_SPECS; i++) {
        if (specs[i].dtype == EG_DTYPE_BF16) continue;
        expected_count++;
        compare(path, &specs[i], eg_safetensors_get(st, specs[i].name));
    }
    /* An int16 tensor: the file is valid, reading it into eagle is not supported. */
    eg_tensor *i16 = eg_safetensors_get(st, "i16");
    CHECK(!i16 && eg_last_status() == EG_ERR_UNSUPPORTED, "%s: i16: expected EG_ERR_UNSUPPORTED",
          path);
    eg_clear_error();
    CHECK(eg_safetensors_count(st) == expected_count + 1, "%s: %d tensors, expected %d", path,
          eg_safetensors_count(st), expected_count + 1);
    const char *source = eg_safetensors_metadata(st, "source");
    CHECK(source && strcmp(source, "python \xc3\xa9") == 0, "%s: metadata source is '%s'", path,
          source ? source : "(missing)");
    eg_safetensors_close(st);
}

static void write_npy(const char *dir) {
    for (int i = 0; i < N_SPECS; i++) {
        if (specs[i].dtype == EG_DTYPE_BF16) continue;
        char name[64], path[4096];
        snprintf(name, sizeof name, "eagle_%s.npy", specs[i].name);
        path_in(path, sizeof path, dir, name);
        eg_tensor *t = make(&specs[i]);
        CHECK(eg_npy_write(path, t) == EG_OK, "%s", eg_last_error());
        eg_release(t);
    }
}

static void check_npy(const char *dir) {
    char path[4096], name[64];
    for (int i = 0; i < N_SPECS; i++) {
        if (specs[i].dtype == EG_DTYPE_BF16) continue;
        snprintf(name, sizeof name, "python_%s.npy", specs[i].name);
        path_in(path, sizeof path, dir, name);
        compare(path, &specs[i], eg_npy_read(path));
    }
    /* Layouts numpy can write that eagle converts: Fortran order, big-endian, format 2.0. */
    static const struct {
        const char *file, *spec;
    } variants[] = {
        {"python_fortran.npy", "f32"},   {"python_fortran_transposed.npy", "transposed"},
        {"python_bigendian.npy", "f64"}, {"python_bigendian_f16.npy", "f16"},
        {"python_v2.npy", "i32"},        {"python_v3.npy", "u8"}};
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        path_in(path, sizeof path, dir, variants[i].file);
        const spec *s = find_spec(variants[i].spec);
        compare(path, s, eg_npy_read(path));
    }
    path_in(path, sizeof path, dir, "python_int16.npy");
    eg_tensor *t = eg_npy_read(path);
    CHECK(!t && eg_last_status() == EG_ERR_UNSUPPORTED, "%s: expected EG_ERR_UNSUPPORTED, got %s",
          path, t ? "a tensor" : eg_last_error());
    eg_clear_error();
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s write-safetensors|check-safetensors|write-npy|check-npy DIR\n",
                argv[0]);
        return 2;
    }
    const char *command = argv[1], *dir = argv[2];
    if (strcmp(command, "write-safetensors") == 0)
        write_safetensors(dir);
    else if (strcmp(command, "check-safetensors") == 0)
        check_safetensors(dir);
    else if (strcmp(command, "write-npy") == 0)
        write_npy(dir);
    else if (strcmp(command, "check-npy") == 0)
        check_npy(dir);
    else {
        fprintf(stderr, "eagle_interop: unknown command %s\n", command);
        return 2;
    }
    eg_shutdown();
    if (failures)
        fprintf(stderr, "eagle_interop %s: %d failure(s)\n", command, failures);
    else
        printf("eagle_interop %s: ok\n", command);
    return failures ? 1 : 0;
}
