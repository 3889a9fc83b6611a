/* tb_events.h - a TensorBoard event-file writer for scalars (loss, learning rate, throughput):
 * the file every training dashboard reads (TensorBoard, and the tools that read its logs).
 * Private to train/ (tests include it too).
 *
 * The file, DIR/events.out.tfevents.<unix time>.<hostname>, is a sequence of TFRecords:
 *     u64 LE length | u32 LE masked CRC32C of those 8 bytes | data | u32 LE masked CRC32C of data
 * (mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8), each data a serialized tensorflow.Event:
 * field 1 wall_time (double), field 2 step (int64), then either field 3 file_version
 * ("brain.Event:2", the first record) or field 5 summary (Summary: repeated field 1 Value
 * {field 1 tag, field 2 simple_value (float)}). The protobuf is encoded here by hand, as the
 * protobuf library would (fields in number order; wall_time and step, proto3 fields without
 * presence, omitted when zero; the oneof members always written).
 *
 * An event file is a log that a dashboard reads while the run goes on, so unlike ingot's other
 * outputs it is not written under a temporary name: records are appended to the file itself.
 * Records are buffered in memory and written on flush (and whenever 64 KiB are pending); a run
 * killed between flushes loses at most the pending records, and a record torn by the kill is the
 * last one, where readers stop (its CRC or length does not check out). Every write is checked:
 * after a failure (disk full) the writer refuses further records with the same error, and close
 * reports it.
 *
 * Thread-safety: a writer is used by one thread at a time.
 */
#ifndef INGOT_TRAIN_TB_EVENTS_H
#define INGOT_TRAIN_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ig_tb_writer ig_tb_writer;

typedef struct ig_tb_writer_opts {
    double start_time;    /* seconds since the epoch for the file name and the file_version
                             record; 0: now (ig_tb_wall_time) */
    const char *hostname; /* for the file name; NULL: gethostname() */
} ig_tb_writer_opts;

ig_tb_writer_opts ig_tb_writer_opts_default(void);

/* Creates dir (and its parents) when missing, then a new event file in it and its first record
 * (file_version "brain.Event:2"), written at once so that the file is valid from the start. The
 * name is events.out.tfevents.<unix time>.<hostname>; when that exists (two writers started in
 * the same second), ".1", ".2", ... is appended: an existing file is never touched. opts may be
 * NULL (defaults); ctx gives the allocator and may be NULL (malloc). IG_ERR_IO names the path
 * that could not be created. Finish *out with ig_tb_writer_close. */
ig_status ig_tb_writer_create(ig_tb_writer **out, ig_ctx *ctx, const char *dir,
                              const ig_tb_writer_opts *opts, ig_err *err);

/* The event file's path; owned by w. */
const char *ig_tb_writer_path(const ig_tb_writer *w);

/* Appends one scalar event: tag (non-empty UTF-8, e.g. "train/loss"), step, value and wall_time
 * (seconds since the epoch, e.g. ig_tb_wall_time()). Buffered: written by the next flush, or
 * now when 64 KiB are pending. IG_ERR_INVALID_ARG for a bad tag; IG_ERR_IO when a write fails
 * (now or earlier). */
ig_status ig_tb_writer_add_scalar(ig_tb_writer *w, const char *tag, int64_t step, float value,
                                  double wall_time, ig_err *err);

/* Writes every pending record to the file (write(2); no fsync). IG_ERR_IO on failure. */
ig_status ig_tb_writer_flush(ig_tb_writer *w, ig_err *err);

/* Flushes, fsyncs and closes the file, and frees w (on failure too: the error is the first of
 * the writer's write, fsync and close errors). NULL is a no-op returning IG_OK. */
ig_status ig_tb_writer_close(ig_tb_writer *w, ig_err *err);

/* Seconds since the Unix epoch (CLOCK_REALTIME), the wall_time TensorBoard expects. */
double ig_tb_wall_time(void);

/* ---- the pieces, for tests ------------------------------------------------------------------- */

/* CRC32C (Castagnoli) of data, as TFRecord uses it (ISA-L's crc32_iscsi). */
uint32_t ig_crc32c(const void *data, size_t len);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t ig_tb_mask_crc(uint32_t crc);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_TRAIN_TB_EVENTS_H */
