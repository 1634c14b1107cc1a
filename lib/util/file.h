/* file.h - small file helpers shared by the readers and writers of lib/io. */
#ifndef DS_UTIL_FILE_H
#define DS_UTIL_FILE_H

#include <stddef.h>
#include <stdint.h>

/* pread exactly n bytes at off, retrying short reads and EINTR.
 * Returns 0, or -1 on an error or end of file (errno set on errors). */
int ds_pread_full(int fd, void *buf, size_t n, uint64_t off);

/* pwrite exactly n bytes at off, retrying short writes and EINTR.
 * Returns 0, or -1 with errno set (ENOSPC when the device takes no more). */
int ds_pwrite_full(int fd, const void *buf, size_t n, uint64_t off);

#endif
