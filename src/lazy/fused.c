/* Fused elementwise loops: a group of elementwise ops evaluated block by block, so the values
 * flowing between them live in small stack-sized buffers instead of full tensors. Each op runs
 * the same inner loop as in eager mode, on the same values in the same order, so results are
 * bitwise identical to eager execution. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "dispatch/dispatch.h"
#include "base/error.h"
#include "base/settings.h"
#include "lazy/internal.h"

enum { BLOCK = 256 };

typedef enum { LEAF_FLAT, LEAF_SCALAR, LEAF_GATHER } leaf_mode;

typedef struct leaf {
    const eg_tensor *tensor;
    leaf_mode mode;
    char *base;
    int64_t strides[EG_MAX_DIMS]; /* bytes, aligned with the root's axes (0 when broadcast) */
} leaf;

typedef struct operand {
    bool is_member; /* else a leaf */
    int index;
} operand;

typedef struct fused_plan {
    eg_tensor *root;
    int n_members;
    eg_tensor *const *members;
    operand (*operands)[3]; /* per member, per input */
    leaf *leaves;
    int n_leaves;
    size_t member_bytes; /* buffer size per member */
    atomic_bool failed;  /* a chunk could not get its buffers */
    /* the root device's backend's fused-loop step (only fusable groups get here) */
    void (*elementwise_flat)(eg__op op, const eg__attrs *attrs, eg_dtype out_dtype,
                             eg_dtype in_dtype, int n_inputs, int64_t n, char *out,
                             char *const *inputs, const int64_t *input_strides);
} fused_plan;

static int find_member(const fused_plan *plan, const eg_tensor *t) {
    for (int i = 0; i < plan->n_members; i++)
        if (plan->members[i] == t) return i;
    return -1;
}

static int add_leaf(fused_plan *plan, const eg_tensor *t) {
    for (int i = 0; i < plan->n_leaves; i++)
        if (plan->leaves[i].tensor == t) return i;
    leaf *l = &plan->leaves[plan->n_leaves];
    const eg_tensor *root = plan->root;
    l->tensor = t;
    l->base = eg__data(t);
    size_t size = eg_dtype_size(t->dtype);
    if (t->n_elems == 1)
        l->mode = LEAF_SCALAR;
    else if (t->n_elems == root->n_elems && eg__is_contiguous(t))
        l->mode = LEAF_FLAT;
    else
        l->mode = LEAF_GATHER;
    for (int d = 0; d < root->n_dims; d++) {
        int td = d - (root->n_dims - t->n_dims);
        l->strides[d] = (td < 0 || t->shape[td] == 1) ? 0 : t->strides[td] * (int64_t)size;
    }
    return plan->n_leaves++;
}

/* Copies elements [begin, begin + n) of the root's row-major order from a broadcast leaf. */
static void gather_leaf(const fused_plan *plan, const leaf *l, int64_t begin, int64_t n,
                        char *out) {
    const eg_tensor *root = plan->root;
    size_t size = eg_dtype_size(l->tensor->dtype);
    int64_t index[EG_MAX_DIMS], rest = begin, offset = 0;
    for (int d = root->n_dims - 1; d >= 0; d--) {
        index[d] = rest % root->shape[d];
        rest /= root->shape[d];
        offset += index[d] * l->strides[d];
    }
    for (int64_t i = 0; i < n; i++) {
        memcpy(out + (size_t)i * size, l->base + offset, size);
        for (int d = root->n_dims - 1; d >= 0; d--) {
            offset += l->strides[d];
            if (++index[d] < root->shape[d]) break;
            offset -= l->strides[d] * root->shape[d];
            index[d] = 0;
        }
    }
}

static void run_blocks(void *context, int64_t first_block, int64_t end_block) {
    const fused_plan *plan = context;
    const eg_tensor *root = plan->root;
    enum { LOCAL_BUFFERS = 8 };
    _Alignas(64) char local[LOCAL_BUFFERS * BLOCK * 8]; /* small groups need no allocation */
    size_t n_buffers = (size_t)(plan->n_members + plan->n_leaves);
    char *buffers = n_buffers <= LOCAL_BUFFERS && plan->member_bytes == BLOCK * 8
                        ? local
                        : malloc(plan->member_bytes * n_buffers);
    if (!buffers) {
        atomic_store(&((fused_plan *)context)->failed, true);
        return;
    }
    char *leaf_buffers = buffers + plan->member_bytes * (size_t)plan->n_members;
    char *root_data = eg__data(root);
    size_t root_size = eg_dtype_size(root->dtype);
    for (int64_t block = first_block; block < end_block; block++) {
        int64_t begin = block * BLOCK;
        int64_t n = root->n_elems - begin < BLOCK ? root->n_elems - begin : BLOCK;
        char *leaf_pointers[64];
        int64_t leaf_strides[64];
        for (int i = 0; i < plan->n_leaves; i++) {
            const leaf *l = &plan->leaves[i];
            size_t size = eg_dtype_size(l->tensor->dtype);
            if (l->mode == LEAF_SCALAR) {
                leaf_pointers[i] = l->base;
                leaf_strides[i] = 0;
            } else if (l->mode == LEAF_FLAT) {
                leaf_pointers[i] = l->base + (size_t)begin * size;
                leaf_strides[i] = (int64_t)size;
            } else {
                leaf_pointers[i] = leaf_buffers + plan->member_bytes * (size_t)i;
                gather_leaf(plan, l, begin, n, leaf_pointers[i]);
                leaf_strides[i] = (int64_t)size;
            }
        }
        for (int m = 0; m < plan->n_members; m++) {
            const eg_tensor *member = plan->members[m];
            const eg__lazy_node *node = member->lazy;
            char *inputs[3];
            int64_t strides[3];
            for (int j = 0; j < node->n_inputs; j++) {
                operand o = plan->operands[m][j];
                if (o.is_member) {
                    inputs[j] = buffers + plan->member_bytes * (size_t)o.index;
                    strides[j] = (int64_t)eg_dtype_size(plan->members[o.index]->dtype);
                } else {
                    inputs[j] = leaf_pointers[o.index];
                    strides[j] = leaf_strides[o.index];
                }
            }
            char *out = m == plan->n_members - 1 ? root_data + (size_t)begin * root_size
                                                 : buffers + plan->member_bytes * (size_t)m;
            eg_dtype in_dtype = node->inputs[node->op == EG__OP_WHERE ? 1 : 0]->dtype;
            plan->elementwise_flat(node->op, &node->attrs, member->dtype, in_dtype, node->n_inputs,
                                   n, out, inputs, strides);
        }
    }
    if (buffers != local) free(buffers);
}

/* ---- the group as a whole, for backends that compile it (backend.h: eg__fused_group) ---- */

static eg_status describe_group(const fused_plan *plan, eg__fused_group *group) {
    const eg_tensor *root = plan->root;
    if (plan->n_members > EG__FUSED_MAX_MEMBERS || plan->n_leaves > EG__FUSED_MAX_LEAVES)
        return eg__error(EG_ERR_UNSUPPORTED,
                         "fused loop on %s: %d ops reading %d tensors; a compiled group takes at "
                         "most %d ops and %d tensors",
                         root->device->name, plan->n_members, plan->n_leaves,
                         EG__FUSED_MAX_MEMBERS, EG__FUSED_MAX_LEAVES);
    group->n_dims = root->n_dims;
    memcpy(group->shape, root->shape, sizeof group->shape);
    group->n_elems = root->n_elems;
    group->out = eg__data(root);
    group->device = root->device;
    group->n_members = plan->n_members;
    group->n_leaves = plan->n_leaves;
    for (int i = 0; i < plan->n_leaves; i++) {
        const leaf *l = &plan->leaves[i];
        group->leaves[i].dtype = l->tensor->dtype;
        group->leaves[i].data = l->base;
        memcpy(group->leaves[i].strides, l->strides, sizeof l->strides);
    }
    for (int m = 0; m < plan->n_members; m++) {
        const eg_tensor *member = plan->members[m];
        const eg__lazy_node *node = member->lazy;
        eg__fused_member *out = &group->members[m];
        out->op = node->op;
        out->attrs = &node->attrs;
        out->dtype = member->dtype;
        out->in_dtype = node->inputs[node->op == EG__OP_WHERE ? 1 : 0]->dtype;
        out->n_inputs = node->n_inputs;
        for (int j = 0; j < node->n_inputs; j++)
            out->operands[j] = (eg__fused_operand){.is_member = plan->operands[m][j].is_member,
                                                   .index = plan->operands[m][j].index};
    }
    return EG_OK;
}

/* EG_FUSION_CHECK=1: every group the CPU fuses is also compiled by the CUDA backend's fusion
 * compiler (NVRTC needs no GPU), so a test run checks that each pattern it produces compiles. */
static bool fusion_check_on(void) {
    static atomic_int state = -1;
    return eg__setting_on_once(&state, "EG_FUSION_CHECK");
}

static eg_status check_compiles(const eg__fused_group *group) {
    const eg__backend *cuda = eg__backends[EG_DEVICE_CUDA];
    if (!cuda || !cuda->compile_fused)
        return eg__error(EG_ERR_UNSUPPORTED,
                         "EG_FUSION_CHECK: this build has no CUDA fusion compiler");
    eg_status status = cuda->compile_fused(group);
    if (status == EG_ERR_DTYPE) { /* a dtype the GPU does not fuse (f16, bf16): nothing to check */
        eg_clear_error();
        return EG_OK;
    }
    return status;
}

eg_status eg__lazy_run_fused(eg_tensor *root, int n_members, eg_tensor *const *members) {
    fused_plan plan = {.root = root,
                       .n_members = n_members,
                       .members = members,
                       .member_bytes = BLOCK * 8,
                       .elementwise_flat = eg__backend_of(root->device)->elementwise_flat};
    enum { LOCAL_MEMBERS = 16 };
    operand local_operands[LOCAL_MEMBERS][3]; /* small groups need no allocation */
    leaf local_leaves[3 * LOCAL_MEMBERS];
    bool local = n_members <= LOCAL_MEMBERS;
    plan.operands = local ? local_operands : malloc(sizeof *plan.operands * (size_t)n_members);
    plan.leaves = local ? local_leaves : malloc(sizeof *plan.leaves * (size_t)(3 * n_members));
    if (!plan.operands || !plan.leaves) {
        if (!local) {
            free(plan.operands);
            free(plan.leaves);
        }
        return eg__error(EG_ERR_OUT_OF_MEMORY, "fused loop: out of host memory");
    }
    eg_status status = EG_OK;
    for (int m = 0; m < n_members && status == EG_OK; m++) {
        const eg__lazy_node *node = members[m]->lazy;
        for (int j = 0; j < node->n_inputs; j++) {
            int member = find_member(&plan, node->inputs[j]);
            if (member >= 0 && member < m) {
                plan.operands[m][j] = (operand){true, member};
            } else {
                if (!node->inputs[j]->storage) {
                    status = eg__error(EG_ERR_INTERNAL, "fused loop: input not computed");
                    break;
                }
                plan.operands[m][j] = (operand){false, add_leaf(&plan, node->inputs[j])};
            }
        }
    }
    if (status == EG_OK && plan.n_leaves > 64)
        status = eg__error(EG_ERR_INTERNAL, "fused loop: too many inputs");
    const eg__backend *backend = eg__backend_of(root->device);
    if (status == EG_OK && (backend->run_fused || fusion_check_on())) {
        eg__fused_group *group = malloc(sizeof *group);
        if (!group) {
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "fused loop: out of host memory");
        } else {
            status = describe_group(&plan, group);
            if (status == EG_OK && backend->run_fused) {
                status = backend->run_fused(group);
            } else if (status == EG_OK) {
                status = check_compiles(group);
            }
            free(group);
        }
        if (backend->run_fused) goto done;
    }
    if (status == EG_OK) {
        int64_t n_blocks = (root->n_elems + BLOCK - 1) / BLOCK;
        eg__parallel_for(n_blocks, EG_PARALLEL_GRAIN_ELEMENTWISE / BLOCK, run_blocks, &plan);
        if (atomic_load(&plan.failed))
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "fused loop: out of host memory");
    }
done:
    if (!local) {
        free(plan.operands);
        free(plan.leaves);
    }
    if (status == EG_OK) { /* check numerics sees the group's result as its last op's */
        const eg__lazy_node *node = root->lazy;
        eg__kernel_call call = {node->op, node->n_inputs, eg__const_tensors(node->inputs), root,
                                &node->attrs};
        status = eg__check_output(&call);
    }
    return status;
}
