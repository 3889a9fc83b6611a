/* safetensors_internal.h - what the safetensors reader and writer share (train/ only): the
 * header size limit and the overflow-checked size of a tensor. */
#ifndef INGOT_TRAIN_SAFETENSORS_INTERNAL_H
#define INGOT_TRAIN_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

/* The largest header the reference reader accepts (MAX_HEADER_SIZE): the writer refuses to
 * write a larger one, the reader to read one. */
#define IG_ST_MAX_HEADER 100000000

enum { IG_ST_SIZE_OK = 0, IG_ST_SIZE_OVERFLOW, IG_ST_SIZE_PARTIAL_BYTE };

/* The element count and byte size of a tensor: IG_ST_SIZE_OK, IG_ST_SIZE_OVERFLOW when the
 * running product of the shape or its bit count overflows 64 bits (refused, as the reference
 * does, even when a later dimension is 0), or IG_ST_SIZE_PARTIAL_BYTE when a sub-byte dtype's
 * bits are not a whole number of bytes. dtype must be a valid ig_st_dtype. */
int ig_st_tensor_size(ig_st_dtype dtype, const uint64_t *shape, int ndim, uint64_t *numel,
                      uint64_t *bytes);

/* Writes "[768, 2304]" (or "[]") into buf (snprintf rules: truncated to cap, NUL-terminated when
 * cap > 0); returns the untruncated length. */
size_t ig_st_format_shape(char *buf, size_t cap, const uint64_t *shape, int ndim);

#endif
