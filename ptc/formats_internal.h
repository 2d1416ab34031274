/* Helpers shared by the checkpoint-format modules (safetensors.c, npy.c):
 * atomic file replacement and quoting untrusted names in messages.
 * Internal; never installed. */
#ifndef PTC_FORMATS_INTERNAL_H
#define PTC_FORMATS_INTERNAL_H

#include <stddef.h>

/* Create a fresh temporary file next to @p path (same directory, so rename
 * is atomic). *tmp_path is allocated with ptc_malloc. PTC_OK or PTC_E_IO. */
int ptc_tmpfile_create(const char *path, char **tmp_path, int *fd);

/* fsync and close @p fd, rename @p tmp_path onto @p path, fsync the
 * directory. On failure removes the temporary file. Always closes @p fd and
 * frees @p tmp_path. PTC_OK or PTC_E_IO. */
int ptc_tmpfile_commit(int fd, char *tmp_path, const char *path);

/* Close @p fd, remove and free @p tmp_path (either may be -1 / NULL). */
void ptc_tmpfile_discard(int fd, char *tmp_path);

/* Write a printable, one-line, truncated rendering of @p len bytes at @p s
 * into @p buf (control bytes as \xNN, at most about 80 source bytes). */
void ptc_quote_name(char *buf, size_t cap, const char *s, size_t len);

#endif
