/* The source of a fused group's CUDA kernel (fusion.h): what NVRTC compiles.
 *
 * A group is written as straight-line code, one statement per member, for one element index i
 * of the root, which a grid-stride loop calls for every element:
 *
 *     long long o0 = 0;                 // the byte offset of each strided (broadcast) leaf
 *     for (d = p.n_dims - 1, rest = i; d > 0; d--) { k = rest % shape[d]; ...; o0 += k * s }
 *     const float l0 = reinterpret_cast<const float *>(p.leaf[0])[i];     // a dense leaf
 *     const float l1 = *reinterpret_cast<const float *>(p.leaf[1] + o0);  // a strided leaf
 *     const float l2 = reinterpret_cast<const float *>(p.leaf[2])[0];     // a scalar leaf
 *     const float m0 = eg_math_mul(l0, l1);
 *     const float m1 = eg_math_clip(m0, p.scalars[0], p.scalars[1]);
 *     reinterpret_cast<float *>(p.out)[i] = m1;
 *
 * Each member calls the eg_math_<op> function of ops_math.cuh (its contract, at its top, is what
 * this file relies on) that the precompiled kernel of that op calls, on values of the same types,
 * so a fused result has the bits of the unfused ops: the functions round every step with _rn
 * intrinsics, which the compiler never contracts across members. bool values stay the bytes
 * they are in memory (unsigned char), as the contract has them.
 *
 * Only the pattern (ops, dtypes, operands, leaf kinds) is in the text; the count, shape,
 * pointers, strides and the ops' scalars are fields of one parameter struct passed by value, so
 * shapes never multiply kernels and groups differing only in a clip bound share one. The
 * parameters are all 8-byte words (no padding, one layout for host and device, checked by a
 * static_assert in the kernel). As in the precompiled kernels (elementwise_kernels.cuh), the
 * index is decomposed with 32-bit division below 2^31 elements: 64-bit division would cost more
 * than the rest of a memory-bound kernel. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/fusion.h"
#include "backend/cuda/kernels.h"
#include "base/error.h"
/* eg__cuda_ops_math_source: ops_math.cuh as a string (cmake/EmbedText.cmake, at build time). */
#include "ops_math_source.h"

/* ---- the hash (the math header's part is computed once) ---- */

uint64_t eg__cuda_fusion_hash(uint64_t hash, const void *data, size_t n) {
    const unsigned char *bytes = data;
    for (size_t i = 0; i < n; i++) hash = (hash ^ bytes[i]) * 1099511628211ull;
    return hash;
}

static pthread_once_t prefix_once = PTHREAD_ONCE_INIT;
static uint64_t prefix_hash;

static void hash_prefix(void) {
    prefix_hash = eg__cuda_fusion_hash(EG__FUSION_HASH_START, eg__cuda_ops_math_source,
                                       sizeof eg__cuda_ops_math_source - 1);
}

const char *eg__cuda_fused_prefix(size_t *length) {
    *length = sizeof eg__cuda_ops_math_source - 1;
    return eg__cuda_ops_math_source;
}

/* ---- a growing string ---- */

typedef struct text {
    char *data;
    size_t length, capacity;
    bool failed; /* out of memory: later appends do nothing */
} text;

__attribute__((format(printf, 2, 3))) static void append(text *t, const char *fmt, ...) {
    if (t->failed) return;
    for (;;) {
        size_t room = t->capacity - t->length;
        va_list args;
        va_start(args, fmt);
        int n = vsnprintf(t->data ? t->data + t->length : NULL, t->data ? room : 0, fmt, args);
        va_end(args);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if (t->data && (size_t)n < room) {
            t->length += (size_t)n;
            return;
        }
        size_t capacity = t->capacity ? t->capacity : 4096;
        while (capacity - t->length <= (size_t)n) capacity *= 2;
        char *data = realloc(t->data, capacity);
        if (!data) {
            t->failed = true;
            return;
        }
        t->data = data;
        t->capacity = capacity;
    }
}

/* ---- what the generator knows of dtypes and ops ---- */

/* The C++ type of a value of dtype in the kernel, which is also its type in memory (a bool is
 * its byte); NULL for dtypes the generator has no code for. */
static const char *value_type(eg_dtype dtype) {
    switch (dtype) {
    case EG_DTYPE_F32:
        return "float";
    case EG_DTYPE_F64:
        return "double";
    case EG_DTYPE_I32:
        return "int";
    case EG_DTYPE_I64:
        return "long long";
    case EG_DTYPE_U8:
    case EG_DTYPE_BOOL:
        return "unsigned char";
    case EG_DTYPE_I8:
        return "signed char";
    default:
        return NULL;
    }
}

/* eg_math_cast's template argument for dtype: bool is named as such there. */
static const char *cast_type(eg_dtype dtype) {
    return dtype == EG_DTYPE_BOOL ? "bool" : value_type(dtype);
}

/* The attrs->scalars an op reads (passed as parameters). */
static int scalars_of(eg__op op) {
    return op == EG__OP_CLIP ? 2 : 0;
}

static bool is_compare(eg__op op) {
    return op == EG__OP_EQUAL || op == EG__OP_NOT_EQUAL || op == EG__OP_LESS ||
           op == EG__OP_LESS_EQUAL || op == EG__OP_GREATER || op == EG__OP_GREATER_EQUAL;
}

static eg_dtype operand_dtype(const eg__fused_group *group, eg__fused_operand o) {
    return o.is_member ? group->members[o.index].dtype : group->leaves[o.index].dtype;
}

static eg_status member_error(int m, eg__op op, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static eg_status member_error(int m, eg__op op, const char *fmt, ...) {
    char message[256];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return eg__error(EG_ERR_INTERNAL, "fused group: member %d (%s): %s", m,
                     (unsigned)op < EG__OP_COUNT ? eg__op_defs[op].name : "?", message);
}

/* ---- checking a group ---- */

static eg_status check_shape(const eg__fused_group *group) {
    if (group->n_dims < 0 || group->n_dims > EG_MAX_DIMS)
        return eg__error(EG_ERR_INTERNAL, "fused group: %d dims (at most %d)", group->n_dims,
                         EG_MAX_DIMS);
    int64_t n = 1;
    for (int d = 0; d < group->n_dims; d++) {
        if (group->shape[d] < 0)
            return eg__error(EG_ERR_INTERNAL, "fused group: dim %d is %lld", d,
                             (long long)group->shape[d]);
        if (group->shape[d] && n > INT64_MAX / group->shape[d])
            return eg__error(EG_ERR_INTERNAL, "fused group: the shape overflows 64 bits");
        n *= group->shape[d];
    }
    if (n != group->n_elems)
        return eg__error(EG_ERR_INTERNAL, "fused group: %lld elements for a shape of %lld",
                         (long long)group->n_elems, (long long)n);
    return EG_OK;
}

static eg_status check_member(const eg__fused_group *group, int m) {
    const eg__fused_member *member = &group->members[m];
    eg__op op = member->op;
    if ((unsigned)op >= EG__OP_COUNT || !eg__cuda_fusable(op))
        return member_error(m, op, "not an op the GPU fuses");
    if (member->n_inputs != eg__op_defs[op].n_inputs)
        return member_error(m, op, "%d inputs, the op takes %d", member->n_inputs,
                            eg__op_defs[op].n_inputs);
    if (scalars_of(op) && !member->attrs) return member_error(m, op, "no attrs");
    if (!value_type(member->dtype) || !value_type(member->in_dtype))
        return eg__error(
            EG_ERR_DTYPE, "fused group: member %d (%s): no fused code for %s", m,
            eg__op_defs[op].name,
            eg_dtype_name(value_type(member->dtype) ? member->in_dtype : member->dtype));
    eg_dtype expected = op == EG__OP_CAST ? member->dtype
                        : is_compare(op)  ? EG_DTYPE_BOOL
                                          : member->in_dtype;
    if (member->dtype != expected)
        return member_error(m, op, "result is %s, expected %s", eg_dtype_name(member->dtype),
                            eg_dtype_name(expected));
    for (int j = 0; j < member->n_inputs; j++) {
        eg__fused_operand o = member->operands[j];
        if (o.is_member ? o.index < 0 || o.index >= m : o.index < 0 || o.index >= group->n_leaves)
            return member_error(m, op, "input %d refers to %s %d, which %s", j,
                                o.is_member ? "member" : "leaf", o.index,
                                o.is_member ? "does not come before it" : "does not exist");
        eg_dtype want = op == EG__OP_WHERE && j == 0 ? EG_DTYPE_BOOL : member->in_dtype;
        if (operand_dtype(group, o) != want)
            return member_error(m, op, "input %d is %s, expected %s", j,
                                eg_dtype_name(operand_dtype(group, o)), eg_dtype_name(want));
    }
    return EG_OK;
}

static eg_status check_group(const eg__fused_group *group) {
    if (!group) return eg__error(EG_ERR_NULL_ARGUMENT, "fused group: NULL");
    if (group->n_members < 1 || group->n_members > EG__FUSED_MAX_MEMBERS)
        return eg__error(EG_ERR_INTERNAL, "fused group: %d members (1 to %d)", group->n_members,
                         EG__FUSED_MAX_MEMBERS);
    if (group->n_leaves < 0 || group->n_leaves > EG__FUSED_MAX_LEAVES)
        return eg__error(EG_ERR_INTERNAL, "fused group: %d leaves (at most %d)", group->n_leaves,
                         EG__FUSED_MAX_LEAVES);
    eg_status status = check_shape(group);
    for (int i = 0; i < group->n_leaves && status == EG_OK; i++)
        if (!value_type(group->leaves[i].dtype))
            status = eg__error(EG_ERR_DTYPE, "fused group: leaf %d: no fused code for %s", i,
                               eg_dtype_name(group->leaves[i].dtype));
    for (int m = 0; m < group->n_members && status == EG_OK; m++) status = check_member(group, m);
    return status;
}

/* Scalar when every dim it spans is broadcast, dense when its strides are the root's own
 * row-major ones (dims of size 1 never move, so their strides do not count). */
static eg__fused_leaf_kind leaf_kind(const eg__fused_group *group, const eg__fused_leaf *leaf) {
    bool scalar = true, dense = true;
    int64_t expected = (int64_t)eg_dtype_size(leaf->dtype);
    for (int d = group->n_dims - 1; d >= 0; d--) {
        if (group->shape[d] == 1) continue;
        if (leaf->strides[d] != 0) scalar = false;
        if (leaf->strides[d] != expected) dense = false;
        expected *= group->shape[d];
    }
    return scalar ? EG__FUSED_LEAF_SCALAR : dense ? EG__FUSED_LEAF_DENSE : EG__FUSED_LEAF_STRIDED;
}

/* ---- writing the kernel ---- */

#define NAME_PREFIX "eg_fused_"
#define NAME_ZEROS  "0000000000000000"

static void write_operand(text *t, eg__fused_operand o) {
    append(t, "%s%d", o.is_member ? "m" : "l", o.index);
}

/* The templates (compare, where, cast) get their types spelled out: a bool operand may be a
 * byte loaded from memory or a member's value, and deduction must not see two types. */
static void write_member(text *t, const eg__fused_group *group, int m, int *scalar) {
    const eg__fused_member *member = &group->members[m];
    eg__op op = member->op;
    append(t, "    const %s m%d = ", value_type(member->dtype), m);
    if (op == EG__OP_CAST)
        append(t, "eg_math_cast<%s, %s>(", cast_type(member->dtype), cast_type(member->in_dtype));
    else if (is_compare(op) || op == EG__OP_WHERE)
        append(t, "eg_math_%s<%s>(", eg__op_defs[op].name, value_type(member->in_dtype));
    else
        append(t, "eg_math_%s(", eg__op_defs[op].name);
    for (int j = 0; j < member->n_inputs; j++) {
        if (j) append(t, ", ");
        write_operand(t, member->operands[j]);
    }
    for (int k = 0; k < scalars_of(op); k++) append(t, ", p.scalars[%d]", (*scalar)++);
    append(t, ");\n");
}

static void write_kernel(text *t, const eg__fused_group *group, const char *compiler,
                         eg__fused_source *source, size_t *name_at) {
    int n_leaves = group->n_leaves, n_strided = 0;
    bool used[EG__FUSED_MAX_LEAVES] = {false};
    for (int m = 0; m < group->n_members; m++)
        for (int j = 0; j < group->members[m].n_inputs; j++)
            if (!group->members[m].operands[j].is_member)
                used[group->members[m].operands[j].index] = true;
    int strided_slot[EG__FUSED_MAX_LEAVES];
    for (int i = 0; i < n_leaves; i++)
        strided_slot[i] = source->leaf_kinds[i] == EG__FUSED_LEAF_STRIDED ? n_strided++ : -1;

    append(t,
           "\n// ---- a fused elementwise group (src/backend/cuda/fusion_source.c) ----\n// %s\n",
           compiler);
    append(t, "struct eg_fused_params {\n    long long n, n_dims, shape[%d];\n    char *out;\n",
           EG_MAX_DIMS);
    if (n_leaves) append(t, "    const char *leaf[%d];\n", n_leaves);
    if (n_strided) append(t, "    long long strides[%d][%d];\n", n_strided, EG_MAX_DIMS);
    if (source->n_scalars) append(t, "    double scalars[%d];\n", source->n_scalars);
    append(t, "};\n");
    size_t words = 3 + EG_MAX_DIMS + (size_t)n_leaves + (size_t)n_strided * EG_MAX_DIMS +
                   (size_t)source->n_scalars;
    append(t, "static_assert(sizeof(eg_fused_params) == %zu, \"the host packs %zu words\");\n\n",
           words * 8, words);

    /* one element; I: unsigned int below 2^31 elements, unsigned long long above */
    append(t,
           "template <typename I>\n"
           "__device__ __forceinline__ void eg_fused_element(const eg_fused_params &p, I i) {\n");
    if (n_strided) {
        for (int s = 0; s < n_strided; s++) append(t, "    long long o%d = 0;\n", s);
        append(t, "    I rest = i;\n"
                  "    for (int d = static_cast<int>(p.n_dims) - 1; d > 0; d--) {\n"
                  "        const I size = static_cast<I>(p.shape[d]);\n"
                  "        const long long k = static_cast<long long>(rest %% size);\n"
                  "        rest /= size;\n");
        for (int s = 0; s < n_strided; s++)
            append(t, "        o%d += k * p.strides[%d][d];\n", s, s);
        append(t, "    }\n");
        for (int s = 0; s < n_strided; s++)
            append(t, "    o%d += static_cast<long long>(rest) * p.strides[%d][0];\n", s, s);
    }
    for (int i = 0; i < n_leaves; i++) {
        if (!used[i]) continue;
        const char *type = value_type(group->leaves[i].dtype);
        append(t, "    const %s l%d = ", type, i);
        switch (source->leaf_kinds[i]) {
        case EG__FUSED_LEAF_SCALAR:
            append(t, "reinterpret_cast<const %s *>(p.leaf[%d])[0];\n", type, i);
            break;
        case EG__FUSED_LEAF_DENSE:
            append(t, "reinterpret_cast<const %s *>(p.leaf[%d])[i];\n", type, i);
            break;
        case EG__FUSED_LEAF_STRIDED:
            append(t, "*reinterpret_cast<const %s *>(p.leaf[%d] + o%d);\n", type, i,
                   strided_slot[i]);
            break;
        }
    }
    int scalar = 0;
    for (int m = 0; m < group->n_members; m++) write_member(t, group, m, &scalar);
    int root = group->n_members - 1;
    append(t, "    reinterpret_cast<%s *>(p.out)[i] = m%d;\n}\n\n",
           value_type(group->members[root].dtype), root);

    append(t, "extern \"C\" __global__ void __launch_bounds__(256) ");
    *name_at = t->length + strlen(NAME_PREFIX);
    append(t, "%s%s(const eg_fused_params p) {\n", NAME_PREFIX, NAME_ZEROS);
    append(t, "    if (p.n < (1ll << 31)) {\n"
              "        const unsigned n = static_cast<unsigned>(p.n);\n"
              "        for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
              "             i += gridDim.x * blockDim.x)\n"
              "            eg_fused_element(p, i);\n"
              "    } else {\n"
              "        const unsigned long long n = static_cast<unsigned long long>(p.n);\n"
              "        for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) *\n"
              "                 blockDim.x + threadIdx.x;\n"
              "             i < n; i += static_cast<unsigned long long>(gridDim.x) * blockDim.x)\n"
              "            eg_fused_element(p, i);\n"
              "    }\n}\n");
}

eg_status eg__cuda_fused_source(const eg__fused_group *group, const char *compiler,
                                eg__fused_source *source) {
    memset(source, 0, sizeof *source);
    eg_status status = check_group(group);
    if (status != EG_OK) return status;
    for (int i = 0; i < group->n_leaves; i++)
        source->leaf_kinds[i] = leaf_kind(group, &group->leaves[i]);
    for (int m = 0; m < group->n_members; m++)
        source->n_scalars += scalars_of(group->members[m].op);

    text t = {0};
    size_t name_at = 0;
    write_kernel(&t, group, compiler, source, &name_at);
    if (t.failed) {
        free(t.data);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "fused group: out of host memory for its source");
    }
    /* Hashed with the name's digits zero, then named by the hash. */
    pthread_once(&prefix_once, hash_prefix);
    source->hash = eg__cuda_fusion_hash(prefix_hash, t.data, t.length);
    snprintf(source->name, sizeof source->name, NAME_PREFIX "%016llx",
             (unsigned long long)source->hash);
    memcpy(t.data + name_at, source->name + strlen(NAME_PREFIX), strlen(NAME_ZEROS));
    source->kernel = t.data;
    source->kernel_length = t.length;
    return EG_OK;
}

void eg__cuda_fused_source_free(eg__fused_source *source) {
    free(source->kernel);
    source->kernel = NULL;
}

/* ---- the parameters ---- */

size_t eg__cuda_fused_params(const eg__fused_group *group, const eg__fused_source *source,
                             int64_t *params) {
    int strided[EG__FUSED_MAX_LEAVES], n_strided = 0;
    for (int i = 0; i < group->n_leaves; i++)
        if (source->leaf_kinds[i] == EG__FUSED_LEAF_STRIDED) strided[n_strided++] = i;
    size_t w = 0;
    params[w++] = group->n_elems;
    int64_t *n_dims = &params[w++];
    int64_t *shape = &params[w];
    w += EG_MAX_DIMS;
    params[w++] = (int64_t)(intptr_t)group->out;
    for (int i = 0; i < group->n_leaves; i++)
        params[w++] = (int64_t)(intptr_t)group->leaves[i].data;
    int64_t(*strides)[EG_MAX_DIMS] =
        (int64_t(*)[EG_MAX_DIMS]) & params[w]; /* [strided leaf][dim] */
    w += (size_t)n_strided * EG_MAX_DIMS;
    memset(shape, 0, sizeof(int64_t) * EG_MAX_DIMS);
    memset(strides, 0, sizeof(int64_t) * EG_MAX_DIMS * (size_t)n_strided);

    /* The root's dims, those of size 1 dropped and each merged into the one before it where
     * every strided leaf steps over the two as over one (row-major). */
    *n_dims = 0;
    for (int d = 0; d < group->n_dims; d++) {
        if (group->shape[d] == 1) continue;
        bool merge = *n_dims > 0;
        for (int s = 0; s < n_strided && merge; s++)
            merge =
                strides[s][*n_dims - 1] == group->leaves[strided[s]].strides[d] * group->shape[d];
        if (merge)
            shape[*n_dims - 1] *= group->shape[d];
        else
            shape[(*n_dims)++] = group->shape[d];
        for (int s = 0; s < n_strided; s++)
            strides[s][*n_dims - 1] = group->leaves[strided[s]].strides[d];
    }
    for (int m = 0; m < group->n_members; m++)
        for (int j = 0; j < scalars_of(group->members[m].op); j++)
            memcpy(&params[w++], &group->members[m].attrs->scalars[j], sizeof(double));
    return w * sizeof(int64_t);
}
