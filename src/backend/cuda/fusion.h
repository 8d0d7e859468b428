/* Internal: lazy fusion on the GPU — a fused elementwise group (backend.h) becomes one CUDA
 * kernel, generated as source, compiled with NVRTC and cached.
 *
 * Two halves: fusion_source.c writes a group's kernel (its pattern only: the ops, dtypes and leaf
 * kinds go into the text; shapes, strides, pointers, the count and the ops' scalars are the
 * kernel's parameters, so one compiled kernel serves every shape and every clip bound), and
 * fusion.c compiles, caches, loads and launches it.
 *
 * The source of a kernel is the text of ops_math.cuh (the device math every precompiled
 * elementwise kernel includes, embedded by the build) followed by the kernel itself; its 64-bit
 * hash names the kernel (eg_fused_<16 hex digits>) and keys both caches:
 *   memory: (hash, architecture) -> the loaded kernel (one per process: a CUDA library is
 *           context-independent, so every GPU of that architecture shares it);
 *   disk:   <dir>/<hash>-sm_<major><minor>.cubin, dir = $EG_CUDA_CACHE_DIR, else
 *           $XDG_CACHE_HOME/eagle/cuda-kernels, else $HOME/.cache/eagle/cuda-kernels; the
 *           source is kept beside it as <hash>.cu for reading. A second run compiles nothing.
 * A cache file carries a header (the hash, the architecture, the byte count and a checksum of
 * the cubin): a truncated, corrupt or foreign file is compiled again and replaced, never
 * loaded. */
#ifndef EAGLE_SRC_BACKEND_CUDA_FUSION_H
#define EAGLE_SRC_BACKEND_CUDA_FUSION_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/kernels.h" /* the hooks: eg__cuda_run_fused, eg__cuda_compile_fused */

/* How the kernel reads a leaf: one element for every index (a broadcast scalar), element i (the
 * root's shape, row-major, contiguous), or at the offset its byte strides give. */
typedef enum eg__fused_leaf_kind {
    EG__FUSED_LEAF_SCALAR,
    EG__FUSED_LEAF_DENSE,
    EG__FUSED_LEAF_STRIDED
} eg__fused_leaf_kind;

/* A group's kernel: the text after the math header, its hash and name, and what the launch
 * needs to lay out the parameters the same way. */
typedef struct eg__fused_source {
    char *kernel; /* malloc'd, NUL-terminated */
    size_t kernel_length;
    uint64_t hash; /* of the math header + kernel, the kernel named eg_fused_ + 16 zeros */
    char name[32]; /* "eg_fused_<hash as 16 hex digits>" */
    eg__fused_leaf_kind leaf_kinds[EG__FUSED_MAX_LEAVES];
    int n_scalars; /* doubles at the end of the parameters, the members' scalars in order */
} eg__fused_source;

/* The kernel's parameters, 8-byte words: count, n_dims, shape[EG_MAX_DIMS], out, a pointer per
 * leaf, EG_MAX_DIMS byte strides per strided leaf, then the scalars (at most 2 per member). */
#define EG__FUSED_MAX_PARAMS                                                                       \
    (3 + EG_MAX_DIMS + EG__FUSED_MAX_LEAVES * (1 + EG_MAX_DIMS) + 2 * EG__FUSED_MAX_MEMBERS)

/* Checks group (ops fusable, operands and dtypes consistent, shape valid) and writes its kernel,
 * which begins with the comment line `// <compiler>`: the compiler and its options are part of
 * the hashed text, so that no cache ever hands out a cubin another compiler made. EG_ERR_INTERNAL
 * naming the member for a malformed group, EG_ERR_UNSUPPORTED for a dtype the generator has no
 * code for (f16, bf16), EG_ERR_OUT_OF_MEMORY. */
eg_status eg__cuda_fused_source(const eg__fused_group *group, const char *compiler,
                                eg__fused_source *source);
void eg__cuda_fused_source_free(eg__fused_source *source);

/* FNV-1a, 64 bits, of n bytes continued from hash (EG__FUSION_HASH_START to begin). */
#define EG__FUSION_HASH_START 14695981039346656037ull
uint64_t eg__cuda_fusion_hash(uint64_t hash, const void *data, size_t n);

/* The math header's text, which every kernel's source begins with. */
const char *eg__cuda_fused_prefix(size_t *length);

/* Packs group's kernel parameters (laid out as source's kernel declares them) into params (room
 * for EG__FUSED_MAX_PARAMS words); returns the byte count. The dims are first merged where every
 * strided leaf allows, so the index math runs over as few dims as possible. */
size_t eg__cuda_fused_params(const eg__fused_group *group, const eg__fused_source *source,
                             int64_t *params);

/* The cache file of group's kernel for compute capability major.minor under the current cache
 * directory. EG_ERR_UNSUPPORTED when no directory can be named (no $HOME, ...), the group's
 * errors as eg__cuda_fused_source. */
eg_status eg__cuda_fusion_cache_file(const eg__fused_group *group, int major, int minor, char *path,
                                     size_t size);

/* Kernels compiled, found on disk and found in memory since the start (or the last reset). */
void eg__cuda_fusion_stats(int64_t *compiled, int64_t *disk_hits, int64_t *memory_hits);

/* Forgets the memory cache (unloading its kernels) and zeroes the statistics: what tests use to
 * stand for a fresh process, and what the backend's shutdown may call to free the kernels. No
 * fused kernel may be running or be launched meanwhile. */
void eg__cuda_fusion_reset(void);

#endif
