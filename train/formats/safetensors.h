/* safetensors.h - reading and writing safetensors files (DESIGN 3.3), the format of checkpoint
 * shards and of the merged Hugging Face export. Private to train/ (tests include it too).
 *
 * The format (https://github.com/huggingface/safetensors): a u64 little-endian header length N,
 * N bytes of UTF-8 JSON
 *     {"__metadata__":{"k":"v",...},"NAME":{"dtype":"F32","shape":[...],"data_offsets":[b,e]},...}
 * padded with spaces to a multiple of 8 bytes, then the tensor bytes (row-major, little-endian);
 * data_offsets are relative to the first byte after the header.
 *
 * Writing: tensors are declared (a pointer to their bytes, or a callback that fills them) and
 * stored in the order declared, back to back from offset 0; commit writes the header and the bytes
 * through ig_atomic_file (temporary name, fsync, rename; no overwrite unless asked) and returns the
 * xxh3 of the whole file, computed while writing. The header is byte-identical to what the
 * reference Rust/Python library writes for the same tensors in the same order (compact JSON,
 * "__metadata__" first, then "dtype", "shape", "data_offsets"; serde_json's string escapes); the
 * reference itself orders tensors by descending dtype then by name, which a caller may do too.
 *
 * Reading: the file is memory-mapped and validated completely before anything is returned, with
 * the rules of the reference reader (safetensors' SafeTensors::read_metadata and validate): header
 * length at most 100,000,000 bytes and within the file; a JSON object; every entry an object with
 * "dtype" (a known name), "shape" (non-negative integers) and "data_offsets" ([begin, end],
 * non-negative integers, begin <= end); the shape's product times the dtype size (overflow-checked;
 * whole bytes for sub-byte dtypes) equal to end - begin; no offset past the end of the file;
 * sorted by offsets, the tensors tile the data area exactly: the first begins at 0, each begins
 * where the previous ends (no overlap, no hole: the reference refuses holes too) and the last ends
 * at the end of the file; "__metadata__" an object of string values. Stricter than the reference:
 * the header must start with '{' (the reference plans to require it), names must be unique (the
 * reference keeps the last of duplicates), an entry holds no other field, a shape has at most
 * IG_ST_MAX_DIMS dimensions (IG_ERR_UNSUPPORTED), and "__metadata__": null is refused. Every
 * refusal names the file, the tensor and what is wrong.
 *
 * Thread-safety: a writer is used by one thread at a time. An open file is read-only: any number of
 * threads may call the accessors at once. The dtype and conversion helpers are pure functions.
 */
#ifndef INGOT_TRAIN_SAFETENSORS_H
#define INGOT_TRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dtypes ---------------------------------------------------------------------------------- */

/* The safetensors dtypes, in the reference's order (its writer sorts by this order, descending). */
typedef enum ig_st_dtype {
    IG_ST_BOOL = 0,
    IG_ST_F4,      /* 4 bits (e2m1) */
    IG_ST_F6_E2M3, /* 6 bits */
    IG_ST_F6_E3M2, /* 6 bits */
    IG_ST_U8,
    IG_ST_I8,
    IG_ST_F8_E5M2,
    IG_ST_F8_E4M3,
    IG_ST_F8_E8M0,
    IG_ST_F8_E4M3FNUZ,
    IG_ST_F8_E5M2FNUZ,
    IG_ST_I16,
    IG_ST_U16,
    IG_ST_F16,
    IG_ST_BF16,
    IG_ST_I32,
    IG_ST_U32,
    IG_ST_F32,
    IG_ST_C64, /* complex: two F32 */
    IG_ST_F64,
    IG_ST_I64,
    IG_ST_U64,
    IG_ST_DTYPE_COUNT
} ig_st_dtype;

/* The most dimensions a tensor may have here (the reference has no limit; models use <= 5). */
#define IG_ST_MAX_DIMS 8

/* The dtype's name in the header ("F32", "BF16", ...), or NULL for a value outside the enum. */
const char *ig_st_dtype_name(ig_st_dtype dtype);
/* Bits per element (4, 6, 8, 16, 32 or 64), or 0 for a value outside the enum. */
unsigned ig_st_dtype_bits(ig_st_dtype dtype);
/* The dtype named name (exact, case-sensitive); IG_OK, or IG_ERR_NOT_FOUND when unknown. */
ig_status ig_st_dtype_parse(const char *name, ig_st_dtype *out);

/* ---- fp32 <-> bf16 / f16 --------------------------------------------------------------------- */

/* bf16 -> fp32 is core's ig_bf16_to_f32 (exact: the bf16 bits are the top half of the fp32 bits).
 * fp32 -> bf16 rounding to nearest, ties to even (as PyTorch's .to(torch.bfloat16)); values that
 * round past the largest bf16 become infinity; any NaN becomes the quiet NaN 0x7FC0: core's
 * ig_bf16_from_f32, the one definition of the rounding, host and device. */
uint16_t ig_f32_to_bf16(float f);
/* IEEE half -> fp32, exact (subnormals, infinities and NaN payloads included). */
float ig_f16_to_f32(uint16_t h);
/* fp32 -> IEEE half rounding to nearest, ties to even (as numpy's and PyTorch's float16): values
 * past 65504 round to infinity, tiny values to half subnormals or zero; NaN becomes sign|0x7E00. */
uint16_t ig_f32_to_f16(float f);
/* Array forms: dst[i] = ig_f32_to_bf16(src[i]) / ig_f32_to_f16(src[i]) for i < n. */
void ig_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);
void ig_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);

/* ---- writer ---------------------------------------------------------------------------------- */

typedef struct ig_st_writer ig_st_writer;

/* Fills len bytes of a tensor's data at byte offset `offset` within the tensor into dst: the
 * writer calls it in order, in pieces of at most 1 MiB, each a multiple of 64 bytes except the last
 * (so no element is split for byte-sized dtypes). Returns IG_OK, or a status with err filled (the
 * writer adds the tensor's name and aborts the file). */
typedef ig_status (*ig_st_fill_fn)(void *user, uint64_t offset, void *dst, size_t len, ig_err *err);

/* Starts writing a safetensors file at path: creates its temporary (path.tmp.PID.N) at once, so a
 * missing directory or, with overwrite == 0, an existing path (IG_ERR_EXISTS, fix option
 * "overwrite") fails here. ctx gives the allocator and may be NULL (malloc). On success *out
 * must be finished with ig_st_writer_commit or ig_st_writer_abort. */
ig_status ig_st_writer_create(ig_st_writer **out, ig_ctx *ctx, const char *path, int overwrite,
                              ig_err *err);

/* Declares the next tensor: name (non-empty UTF-8, not "__metadata__", not declared before;
 * copied), dtype, shape[0..ndim) (ndim in [0, IG_ST_MAX_DIMS]; shape may be NULL when ndim is 0: a
 * scalar of one element) and data, the tensor's bytes in the file's layout (row-major
 * little-endian, numel * bits / 8 of them; may be NULL when that is 0). data is NOT copied: it must
 * stay valid and unchanged until commit returns. IG_ERR_INVALID_ARG for a bad name, dtype or shape
 * (a size that overflows, or a sub-byte dtype whose size is not whole bytes). */
ig_status ig_st_writer_add(ig_st_writer *w, const char *name, ig_st_dtype dtype,
                           const uint64_t *shape, int ndim, const void *data, ig_err *err);

/* Like ig_st_writer_add, with the bytes produced at commit by fill(user, ...) instead of read
 * from memory (a tensor converted or gathered piece by piece, without a full copy). user must
 * stay valid until commit returns. */
ig_status ig_st_writer_add_fill(ig_st_writer *w, const char *name, ig_st_dtype dtype,
                                const uint64_t *shape, int ndim, ig_st_fill_fn fill, void *user,
                                ig_err *err);

/* Sets "__metadata__"[key] = value (both UTF-8, copied; setting a key again replaces its value;
 * keys are written in the order first set). */
ig_status ig_st_writer_set_metadata(ig_st_writer *w, const char *key, const char *value,
                                    ig_err *err);

/* Writes the header and every tensor's bytes, fsyncs and renames the file into place, and frees
 * w, on failure too (the temporary is then removed and path is untouched). IG_ERR_INVALID_ARG
 * when two tensors have the same name; a fill callback's error, prefixed with the tensor's name.
 * *xxh3 (may be NULL) receives the XXH3-64 of the whole file, as ig_file_xxh3 would compute it. */
ig_status ig_st_writer_commit(ig_st_writer *w, uint64_t *xxh3, ig_err *err);

/* Discards the file being written (removes the temporary) and frees w. NULL is a no-op. */
void ig_st_writer_abort(ig_st_writer *w);

/* ---- reader ---------------------------------------------------------------------------------- */

typedef struct ig_st_file ig_st_file;
typedef struct ig_st_tensor ig_st_tensor;

/* Maps path and validates it completely (see the top of this file). IG_ERR_FORMAT (or
 * IG_ERR_UNSUPPORTED) with "PATH: tensor 'NAME': what is wrong" for a malformed file; IG_ERR_IO
 * when it cannot be opened or mapped. ctx may be NULL (malloc). Free *out with ig_st_file_free. */
ig_status ig_st_file_open(ig_st_file **out, ig_ctx *ctx, const char *path, ig_err *err);

/* The same validation over a buffer in memory; name is used in messages. The buffer is not
 * copied: it must outlive *out. */
ig_status ig_st_file_open_memory(ig_st_file **out, ig_ctx *ctx, const void *data, size_t size,
                                 const char *name, ig_err *err);

/* Unmaps and frees f; every tensor and string obtained from it becomes invalid. NULL: no-op. */
void ig_st_file_free(ig_st_file *f);

/* The path (or name) given to open; owned by f. */
const char *ig_st_file_path(const ig_st_file *f);
/* The header length N (the tensor bytes start at file offset 8 + N). */
uint64_t ig_st_file_header_len(const ig_st_file *f);
/* Number of tensors. */
size_t ig_st_file_count(const ig_st_file *f);
/* The i-th tensor in file order (ascending data_offsets; zero-size tensors at the same offset in
 * header order), i < count; owned by f. */
const ig_st_tensor *ig_st_file_tensor(const ig_st_file *f, size_t i);
/* The tensor called name (O(log n)), or NULL. Owned by f. */
const ig_st_tensor *ig_st_file_find(const ig_st_file *f, const char *name);

/* The value of "__metadata__"[key], or NULL when absent. Owned by f. */
const char *ig_st_file_metadata(const ig_st_file *f, const char *key);
/* Number of metadata entries, and the i-th (i < count) in header order; owned by f. */
size_t ig_st_file_metadata_count(const ig_st_file *f);
void ig_st_file_metadata_at(const ig_st_file *f, size_t i, const char **key, const char **value);

/* A tensor's properties; everything is owned by its file. */
const char *ig_st_tensor_name(const ig_st_tensor *t);
ig_st_dtype ig_st_tensor_dtype(const ig_st_tensor *t);
int ig_st_tensor_ndim(const ig_st_tensor *t);              /* 0 for a scalar */
const uint64_t *ig_st_tensor_shape(const ig_st_tensor *t); /* ndim entries */
uint64_t ig_st_tensor_numel(const ig_st_tensor *t);  /* product of the shape (1 for a scalar) */
uint64_t ig_st_tensor_bytes(const ig_st_tensor *t);  /* end - begin */
uint64_t ig_st_tensor_offset(const ig_st_tensor *t); /* begin, relative to the data area */
/* The tensor's bytes in the mapping (read-only; valid until the file is freed). The address is
 * aligned as the tensor's offset is: the data area starts on an 8-byte boundary when the header
 * length is a multiple of 8 (always, in files written by ingot or the reference library), and the
 * reference writer orders tensors by descending dtype size so that each is aligned to its element;
 * ingot's writer keeps the caller's order. Check the alignment, or use memcpy, before typed loads.
 */
const void *ig_st_tensor_data(const ig_st_tensor *t);

/* Copies the tensor's numel elements into out[0..n) as fp32: F32 copied, BF16 and F16 converted
 * exactly. n must equal the tensor's numel (IG_ERR_INVALID_ARG otherwise, so that a shape mistake
 * is caught); other dtypes give IG_ERR_UNSUPPORTED. Thread-safe. */
ig_status ig_st_tensor_to_f32(const ig_st_tensor *t, float *out, uint64_t n, ig_err *err);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_TRAIN_SAFETENSORS_H */
