/* next_token.c - the next-token objective (objective.h): cross-entropy of every next token over
 * token shards, the language models' (the decoder presets). A micro-batch of tokens [B, T + 1] is
 * staged into the slot as its family keeps it (objective.h: ids, targets and document ids, this
 * rank's vocabulary slice of them under tensor parallelism), with the gradient of each row's loss;
 * the loss is the mean over the counted rows (all, or with train.eod_mask_loss those whose input is
 * not the end-of-document token). The shape takes its vocabulary from the shards' manifests. Its
 * evaluation and its sampler (text generation) are in next_token_use.c.
 *
 * Host staging (m->h_i32, m->h_f32): per slot [N] ids, [N] targets, [N] document ids; [N] losses,
 * then [N] the mask of counted rows.
 */
#include <string.h>

#include "family/family.h"
#include "next_token_model.h"
#include "parallel/stage.h"

/* next_token_use.c */
ig_status ig_next_token_evaluate(ig_ctx *ctx, ig_backend *be, const char *path,
                                 const ig_eval_opts *o, ig_eval_result *res, ig_err *err);

static ig_status nt_stage(ig_model *m, int slot, const ig_micro_batch *mb, float grad_scale,
                          uint64_t *counted, ig_err *err) {
    const int32_t *tokens = mb->tokens;
    int B = mb->B, T = mb->T;
    const ig_batch_opts *o = mb->bo;
    if (!tokens || B <= 0 || T <= 0 || B > m->B || T > m->T || slot < 0 || slot >= m->part.slots)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a micro-batch of %d x %d tokens does not fit the model's %d x %d", B, T,
                          m->B, m->T);
    if (m->part.sp && ((int64_t)B * T) % m->part.tp)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "sequence parallelism: %d x %d tokens do not split into %d equal parts",
                          B, T, m->part.tp);
    m->slot = slot;
    m->slot_B[slot] = B;
    m->slot_T[slot] = T;
    uint64_t N = (uint64_t)B * (uint64_t)T, stride = (uint64_t)m->B * (uint64_t)m->T;
    int32_t *in = m->h_i32 + (uint64_t)slot * m->acts.i32, *tg = in + stride, *doc = tg + stride;
    float *host = m->h_f32 + (uint64_t)slot * m->acts.io_f32;
    float *mask = host + stride; /* 1 for a counted row */
    int32_t eod = o ? o->eod_id : -1;
    int32_t vl = m->cfg.padded_vocab / m->part.tp, v0 = m->part.tp_rank * vl, tp = m->part.tp;
    int V = m->cfg.vocab_size;
    m->doc_attention = o && o->doc_attention && eod >= 0;
    uint64_t count = 0;
    for (int b = 0; b < B; b++) {
        const int32_t *row = tokens + (size_t)b * (size_t)(T + 1);
        int32_t d = 0;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * (size_t)T + (size_t)t;
            int32_t x = row[t], y = row[t + 1];
            if (x < 0 || x >= V || y < 0 || y >= V) {
                int bad_x = x < 0 || x >= V;
                return ig_err_set(err, IG_ERR_INVALID_ARG,
                                  "token %d at row %d, position %d is outside the model's "
                                  "vocabulary of %d",
                                  bad_x ? x : y, b, bad_x ? t : t + 1, V);
            }
            in[i] = tp == 1 ? x : (x >= v0 && x < v0 + vl ? x - v0 : -1);
            tg[i] = tp == 1 ? y : (y >= v0 && y < v0 + vl ? y - v0 : -1);
            doc[i] = d;
            if (eod >= 0 && x == eod) d++; /* the next token starts a new document */
            int masked = o && o->eod_mask_loss && eod >= 0 && x == eod;
            mask[i] = masked ? 0.0f : 1.0f;
            count += !masked;
        }
    }
    if (counted) *counted = count;
    int32_t *dev = m->i32 + (uint64_t)slot * m->acts.i32;
    ig_status st = IG_OK;
    for (int k = 0; k < 3 && st == IG_OK; k++)
        st = ig_backend_upload(m->be, dev + (uint64_t)k * stride, in + (uint64_t)k * stride,
                               N * sizeof(int32_t), err);
    if (st != IG_OK || !m->part.last || !(grad_scale > 0)) return st;
    /* d(mean loss)/d(loss_i) = 1 / count for a counted row, scaled; uploaded into the slot's
     * gradient of the losses (the host mask stays for the loss) */
    float g = count ? grad_scale / (float)count : 0.0f;
    for (uint64_t i = 0; i < N; i++) host[i] = mask[i] * g;
    return ig_backend_upload(m->be, ig_model_io_f32(m, stride), host, N * sizeof(float), err);
}

static ig_status nt_loss(ig_model *m, int slot, double *loss, ig_err *err) {
    m->slot = slot;
    int N = m->slot_B[slot] * m->slot_T[slot];
    uint64_t stride = (uint64_t)m->B * (uint64_t)m->T;
    float *losses = m->h_f32 + (uint64_t)slot * m->acts.io_f32, *mask = losses + stride;
    ig_status st =
        ig_backend_download(m->be, losses, ig_model_io_f32(m, 0), (size_t)N * sizeof(float), err);
    if (st != IG_OK) return st;
    double sum = 0;
    uint64_t n = 0;
    for (int i = 0; i < N; i++)
        if (mask[i] != 0.0f) sum += losses[i], n++;
    *loss = n ? sum / (double)n : 0.0;
    return IG_OK;
}

/* The vocabulary and the end-of-document id the shards were made with: the configuration's
 * vocabulary must hold the shards' (0: take theirs); the masks need an end-of-document id. */
static ig_status nt_fit(ig_fit *fit, const ig_train_config *t, const ig_data_facts *facts,
                        ig_err *err) {
    if (facts->vocab == 0 && t->model.vocab_size == 0)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.vocab_size: the shards have no manifest to take it from; set it");
    if (t->model.vocab_size && facts->vocab > t->model.vocab_size)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.vocab_size %d is smaller than the shards' vocabulary of %d",
                          t->model.vocab_size, facts->vocab);
    if (!fit->shape.vocab_size) fit->shape.vocab_size = facts->vocab;
    ig_status st = ig_model_config_check(&fit->shape, err);
    if (st != IG_OK) return st;
    fit->bo = (ig_batch_opts){t->eod_mask_loss, t->doc_attention, facts->eod};
    if ((t->eod_mask_loss || t->doc_attention) && facts->eod < 0)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "train.eod_mask_loss and train.doc_attention need an end-of-document "
                          "id, and the shards' manifests name none");
    fit->B = t->micro_batch;
    fit->T = fit->shape.seq_len;
    return IG_OK;
}

/* Megatron's sequence parallelism cuts a micro-batch's token rows into tp equal parts. */
static ig_status nt_check_layout(const ig_train_config *t, const ig_model_config *c, int tp, int sp,
                                 ig_err *err) {
    if (sp && ((int64_t)t->micro_batch * c->seq_len) % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.sp: train.micro_batch %d x model.seq_len %d tokens do not "
                          "split into parallel.tp %d equal parts",
                          t->micro_batch, c->seq_len, tp);
    return IG_OK;
}

static ig_status nt_plannable(const ig_model_config *c, ig_err *err) {
    if (c->vocab_size == 0)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.vocab_size is 0 (ingot train reads it from the shards' "
                          "manifests): set it to plan, e.g. --set model.vocab_size=50257");
    return IG_OK;
}

static int nt_repeats(const ig_train_config *t) {
    (void)t;
    return 1;
}

const ig_objective ig_objective_next_token = {.name = "next-token",
                                              .input = "tokens",
                                              .sampler = "text",
                                              .units = "samples",
                                              .shapes_vary = 0,
                                              .fit = nt_fit,
                                              .check_layout = nt_check_layout,
                                              .plannable = nt_plannable,
                                              .eval_repeats = nt_repeats,
                                              .stage = nt_stage,
                                              .loss = nt_loss,
                                              .evaluate = ig_next_token_evaluate};

/* ---- a whole model on one process (train.h) -------------------------------------------------- */

static ig_status need_tokens(const ig_model *m, ig_err *err) {
    if (!(m->part.tp == 1 && m->part.first && m->part.last))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "this model is one rank's part (tp %d, layers %d..%d): run it through "
                          "the trainer's schedule",
                          m->part.tp, m->part.l0, m->part.l1 - 1);
    if (m->fam->objective != &ig_objective_next_token)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s models read %s, not tokens", m->fam->arch,
                          m->fam->objective->input);
    return IG_OK;
}

ig_status ig_model_forward(ig_model *m, const int32_t *tokens, int B, int T, const ig_batch_opts *o,
                           double *loss, uint64_t *counted, ig_err *err) {
    ig_status st = need_tokens(m, err);
    ig_micro_batch in = {.tokens = tokens, .B = B, .T = T, .bo = o};
    if (st == IG_OK) st = nt_stage(m, 0, &in, 0.0f, counted, err);
    if (st == IG_OK) st = ig_stage_forward(m, 0, 0, err);
    if (st == IG_OK) st = ig_backend_sync(m->be, err);
    return st == IG_OK ? nt_loss(m, 0, loss, err) : st;
}

ig_status ig_model_forward_backward(ig_model *m, const int32_t *tokens, int B, int T,
                                    const ig_batch_opts *o, float grad_scale, double *loss,
                                    uint64_t *counted, ig_err *err) {
    ig_status st = need_tokens(m, err);
    if (st == IG_OK && m->part.inference)
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "a model opened for inference has no gradients");
    if (st == IG_OK && !(grad_scale > 0))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "grad_scale must be > 0, got %g",
                        (double)grad_scale);
    ig_micro_batch in = {.tokens = tokens, .B = B, .T = T, .bo = o};
    if (st == IG_OK) st = nt_stage(m, 0, &in, grad_scale, counted, err);
    if (st == IG_OK) st = ig_stage_forward(m, 0, 1, err);
    if (st == IG_OK) st = ig_stage_backward(m, 0, err);
    return st == IG_OK ? nt_loss(m, 0, loss, err) : st;
}
