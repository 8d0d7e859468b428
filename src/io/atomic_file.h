/* Atomic file replacement for writers of checkpoints and arrays: the data goes to a temporary file
 * in the destination's directory (for a symlink, its target's), which is flushed, fsync'ed and
 * renamed over the destination, after which the directory is fsync'ed. A reader therefore sees
 * either the old file or the complete new one, also after a crash or power loss; a failure at any
 * step removes the temporary file and leaves the old file untouched.
 *
 * Usage:
 *     eg__atomic_file file;
 *     if (eg__atomic_open(&file, path) != EG_OK) return eg_last_status();
 *     eg__atomic_write(&file, header, n);   // errors are remembered, checking each is optional
 *     eg__atomic_write(&file, data, m);
 *     return eg__atomic_commit(&file);      // or eg__atomic_abort(&file) to give up
 */
#ifndef EAGLE_SRC_IO_ATOMIC_FILE_H
#define EAGLE_SRC_IO_ATOMIC_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "eagle/status.h"
#include "eagle/tensor.h"

typedef struct eg__atomic_file {
    FILE *stream;
    char *path;      /* the destination, as given (what messages name) */
    char *target;    /* what is replaced: path, or the file its chain of symlinks ends at */
    char *temp_path; /* "<target>.tmp.<pid>.<sequence>", in target's directory */
    eg_status status;
} eg__atomic_file;

/* Prepares replacing path. When path is a symlink (or a chain of them), the file it points to is
 * what gets replaced, in its own directory, and the link stays a link; a dangling link's target
 * is created. An existing target keeps its permission bits (rwx for user, group, others; not
 * set-id or sticky bits, not its owner); a new file gets 0666 minus the umask. Before creating its
 * own temporary file, removes the temporary files of this target that earlier writers left behind
 * when killed mid-write (see eg__remove_stale_temp_files).
 * The temporary file is "<target>.tmp.<pid>.<n>" (n counts the process's atomic writes, so that
 * threads saving the same path never share a temporary file).
 * EG_ERR_IO with the system's reason when it cannot be created (directory missing, not writable,
 * ...), when path is a directory, a device, FIFO or socket (never replaced), or a symlink loop
 * (more than 40 links); EG_ERR_NULL_ARGUMENT for a NULL path, EG_ERR_INVALID_ARGUMENT for an
 * empty one, EG_ERR_OUT_OF_MEMORY. On failure nothing is left to clean up. */
eg_status eg__atomic_open(eg__atomic_file *file, const char *path);

/* Appends n bytes (data may be NULL when n == 0). After the first failure (EG_ERR_IO: a full disk,
 * a file size limit, an I/O error) further writes do nothing and return that status, which
 * eg__atomic_commit also returns. */
eg_status eg__atomic_write(eg__atomic_file *file, const void *data, size_t n);

/* Appends t's elements in row-major order of its shape, little-endian, whatever t's layout (views
 * are gathered) and device (copied to the host). Returns like eg__atomic_write; a failure to read
 * t (or to allocate the gathering buffer) is also recorded so that the commit aborts. */
eg_status eg__atomic_write_tensor(eg__atomic_file *file, const eg_tensor *t);

/* Records a failure found by the caller (e.g. a tensor that cannot be read) so that the commit
 * turns into an abort. Returns status. */
eg_status eg__atomic_fail(eg__atomic_file *file, eg_status status);

/* Flushes, fsyncs and closes the temporary file, renames it over the destination and fsyncs the
 * directory. On failure before the rename the temporary file is removed and the destination is
 * unchanged (EG_ERR_IO naming the destination and the failing step). A failure to fsync the
 * directory after the rename is also EG_ERR_IO, although the new file is then in place. Always
 * releases what eg__atomic_open acquired. */
eg_status eg__atomic_commit(eg__atomic_file *file);

/* Closes and removes the temporary file; the destination is unchanged. */
void eg__atomic_abort(eg__atomic_file *file);

/* Whether name is "<prefix><pid>.<n><suffix>" (pid and n decimal digits, nothing else) for a pid
 * that no live process has (kill(pid, 0) fails with ESRCH): the temporary file of a writer that
 * died before committing. A pid that is alive, even if reused since by another program, or that
 * belongs to another user's process (EPERM), is never stale. */
bool eg__temp_name_is_stale(const char *name, const char *prefix, const char *suffix);

/* Removes from dir the regular files that eg__temp_name_is_stale(name, prefix, suffix) calls
 * stale and that this user owns; never follows a symlink. Best effort, nothing raised; returns
 * how many were removed. PIDs are those of this PID namespace: a directory shared with writers
 * in another namespace (a container) must not rely on it. */
int eg__remove_stale_temp_files(const char *dir, const char *prefix, const char *suffix);

#endif
