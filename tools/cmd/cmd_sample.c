/* cmd_sample.c - `ingot sample MODEL --tokenizer T --prompt TEXT --tokens N`: text from a model,
 * one token at a time with a KV cache, printed as it comes; and from a diffusion model
 * (`--frames F --size HxW --steps N --cfg S --label K --output out.mp4 --png sheet.png`), videos
 * written as H.264 MP4 and a PNG contact sheet - of a model of latents, its latents decoded
 * through the VAE they came from (`--vae DIR`). Thin over ig_model_open, ig_model_generate,
 * ig_model_sample_video and ig_model_vae_decode_rgb; the draws are keyed by --seed, so a seed
 * gives the same text or videos every time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "cmd_text_encoder.h"
#include "preprocess/preprocess.h"
#include "train/train.h"

const char ig_usage_sample[] =
    "usage: ingot sample MODEL --tokenizer T --prompt TEXT [--tokens N] [--temperature X]\n"
    "                    [--top-k K] [--top-p P] [--seed S]\n"
    "       ingot sample DIT_MODEL --frames F --size HxW [--steps N] [--cfg S]\n"
    "                    [--label K | --tokenizer T --prompt TEXT | --text-encoder DIR\n"
    "                    --prompt TEXT] [--vae DIR]\n"
    "                    [--num V] [--seed S] [--output OUT.mp4] [--png SHEET.png] [--fps R]\n"
    "                    [--weights ema|raw] [--force]\n"
    "\n"
    "Generates up to N tokens after TEXT and prints the prompt and the text as it comes. The\n"
    "prompt goes through the model at once, then each token alone over a cache of keys and\n"
    "values. Generation stops at the end-of-document token or at the model's last position.\n"
    "MODEL is a checkpoint directory (or a run directory: its latest), a Hugging Face GPT-2 or\n"
    "Llama directory, or a model.safetensors with its config.json beside it. A model whose\n"
    "weights are not finite (NaN, infinity) is refused.\n"
    "\n"
    "options:\n"
    "  --tokenizer T       the tokenizer the model was trained with (as for ingot tokenize:\n"
    "                      tokenizer.json, .tiktoken, a SentencePiece .model, ...)\n"
    "  --prompt TEXT       the text to continue\n"
    "  --tokens N          tokens to generate (default 64)\n"
    "  --temperature X     softmax temperature; 0: always the most likely token (default 1)\n"
    "  --top-k K           draw among the K most likely tokens only (default 0: all)\n"
    "  --top-p P           draw among the most likely tokens whose probabilities add up to P\n"
    "                      (default 1: all; 0: the most likely token alone)\n"
    "  --seed S            the draws' seed (default 1234)\n"
    "  --threads N, --quiet, --verbose\n"
    "\n"
    "A diffusion model (model.arch dit) samples videos: Euler steps of the flow from noise\n"
    "(t = 1) to a video (t = 0), with classifier-free guidance toward --label (model.cond\n"
    "class) or --prompt (model.cond caption).\n"
    "  --frames F, --size HxW   the videos' frames and size in pixels (whole patches of\n"
    "                      model.patch; of a model of latents, the VAE's latents of that size)\n"
    "  --steps N           Euler steps (default 50)\n"
    "  --cfg S             guidance scale: v = v_null + S (v_label - v_null); 1: none (default 4)\n"
    "  --label K           the class (default -1: the null class, unconditional)\n"
    "  --prompt TEXT       a caption model's caption (--tokenizer: the clips' captions'); none:\n"
    "                      the null caption, unconditional\n"
    "  --text-encoder DIR  for a model trained on caption features (data.caption_features): the\n"
    "                      frozen T5 that made them (a Hugging Face directory, with its tokenizer\n"
    "                      or --tokenizer's); the prompt is encoded as ingot preprocess captions\n"
    "                      encodes a caption (</s> appended, cut to model.caption_len), and the\n"
    "                      null caption is the model's learned one (y_embedding); an encoder "
    "other\n"
    "                      than the model's (width, shape, weights or tokenizer) is refused\n"
    "  --vae DIR           for a model trained on latent shards (ingot preprocess latents): the\n"
    "                      VAE they came from (a run, a checkpoint or an export), whose decoder\n"
    "                      turns the sampled latents into frames (z = x0 / scaling + shift); a\n"
    "                      VAE other than the model's (its weights) is refused\n"
    "  --num V             videos (default 1); --seed S keys their noise\n"
    "  --output OUT.mp4    H.264 MP4 at --fps R (default 8); with --num > 1: OUT-0.mp4 ...\n"
    "  --png SHEET.png     a contact sheet: one row per video, up to 8 frames of each\n"
    "  --shift X           the time grid's shift (diffusion.shift; default 1)\n"
    "  --weights W         a checkpoint's weights: ema (default when it holds one) or raw\n"
    "  --force             replace output files that exist (without it, that is an error;\n"
    "                      never a device, a pipe or a directory, nor --output and --png as\n"
    "                      one file)\n"
    "\n"
    "examples:\n"
    "  ingot sample out/gpt-tiny --tokenizer data/gpt2 --prompt 'ROMEO:' --tokens 100\n"
    "  ingot sample out/gpt-tiny-hf --tokenizer data/gpt2 --prompt 'To be' --temperature 0.8 \\\n"
    "      --top-k 40 --seed 7\n"
    "  ingot sample out/dit-tiny --frames 8 --size 32x32 --label 2 --num 4 --steps 30 \\\n"
    "      --output out/dit.mp4 --png out/dit.png\n"
    "  ingot sample out/dit-tiny-t5 --frames 8 --size 16x16 --text-encoder \\\n"
    "      tests/data/golden/t5/gated --prompt 'a mandelbrot zoom' --png out/fractal.png\n"
    "  ingot sample out/dit-latent --vae out/vae-tiny --frames 8 --size 32x32 --label 1 \\\n"
    "      --output out/latent.mp4 --png out/latent.png\n";

typedef struct sample_args {
    const char *tokenizer, *prompt, *text_encoder, *vae;
    int tokens, top_k;
    double temperature, top_p;
    uint64_t seed;
    /* videos */
    int frames, steps, num, fps, weights, force;
    int64_t label;
    const char *size, *output, *png;
    double cfg, shift;
    ig_common_flags flags;
} sample_args;

static const ig_cfg_key sample_keys[] = {
    IG_KEY_STRING("sample.tokenizer", sample_args, tokenizer, "", "the tokenizer"),
    IG_KEY_STRING("sample.prompt", sample_args, prompt, "", "the text to continue"),
    IG_KEY_STRING("sample.text_encoder", sample_args, text_encoder, "",
                  "a DiT of caption features: the frozen T5 that made them"),
    IG_KEY_STRING("sample.vae", sample_args, vae, "",
                  "a DiT of latents: the VAE they came from, to decode them"),
    IG_KEY_INT("sample.tokens", sample_args, tokens, "64", 0, 1048576, "tokens to generate"),
    IG_KEY_FLOAT("sample.temperature", sample_args, temperature, "1", 0, 100,
                 "softmax temperature (0: greedy)"),
    IG_KEY_INT("sample.top_k", sample_args, top_k, "0", 0, 1073741824, "top-k (0: off)"),
    IG_KEY_FLOAT("sample.top_p", sample_args, top_p, "1", 0, 1,
                 "nucleus (1: off; 0: the most likely token)"),
    IG_KEY_INT("sample.seed", sample_args, seed, "1234", 0, 9.2e18, "seed of the draws"),
    IG_KEY_INT("sample.frames", sample_args, frames, "0", 0, 4096, "a video's frames"),
    IG_KEY_STRING("sample.size", sample_args, size, "", "a video's size, HxW"),
    IG_KEY_INT("sample.steps", sample_args, steps, "50", 1, 100000, "Euler steps"),
    IG_KEY_FLOAT("sample.cfg", sample_args, cfg, "4", 0, 1000, "classifier-free guidance scale"),
    IG_KEY_INT("sample.label", sample_args, label, "-1", -1, 1 << 24,
               "the class (-1: unconditional)"),
    IG_KEY_INT("sample.num", sample_args, num, "1", 1, 4096, "videos"),
    IG_KEY_INT("sample.fps", sample_args, fps, "8", 1, 240, "the MP4's frame rate"),
    IG_KEY_STRING("sample.output", sample_args, output, "", "the MP4 (OUT-K.mp4 for several)"),
    IG_KEY_STRING("sample.png", sample_args, png, "", "the contact sheet"),
    IG_KEY_FLOAT("sample.shift", sample_args, shift, "1", 1e-3, 1e3, "the time grid's shift"),
    IG_KEY_BOOL("sample.force", sample_args, force, "false", "replace existing output files"),
    IG_KEY_ENUM("sample.weights", sample_args, weights, "default", ig_weights_names,
                "a checkpoint's weights: ema or raw (default: the EMA when it holds one)"),
};

/* The sampling's progress: every model call is one step of one chunk of videos; total =
 * chunks x steps. On a terminal a line updated in place at each step, elsewhere (a log) a line
 * at every tenth of the way; both with the time so far and the ETA. */
typedef struct progress {
    const sample_args *a;
    double t0;
    int done, total, tenth;
} progress;

static void duration(double s, char *buf, size_t cap) {
    if (s >= 3600)
        snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60)
        snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else
        snprintf(buf, cap, "%.1fs", s);
}

static void step_progress(void *user, int step, int steps) {
    (void)step, (void)steps;
    progress *p = user;
    if (p->a->flags.quiet) return;
    p->done++;
    double el = ig_now() - p->t0, eta = el / p->done * (p->total - p->done);
    char e[32], r[32];
    duration(el, e, sizeof e);
    duration(eta, r, sizeof r);
    int tenth = (int)((long long)p->done * 10 / p->total);
    if (isatty(2)) {
        fprintf(stderr, "\ringot: sampling: step %d/%d, %s, ETA %s   %s", p->done, p->total, e, r,
                p->done == p->total ? "\n" : "");
    } else if (tenth > p->tenth || p->done == p->total) {
        fprintf(stderr, "ingot: sampling: step %d/%d (%d%%), %s, ETA %s\n", p->done, p->total,
                (int)((long long)p->done * 100 / p->total), e, r);
        p->tenth = tenth;
    }
    fflush(stderr);
}

/* OUT.mp4 for one video; OUT-K.mp4 for video K of several */
static const char *video_path(const char *out, int k, int num, char *buf, size_t cap) {
    if (num == 1) return out;
    const char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
    if (!dot || (slash && dot < slash)) dot = out + strlen(out);
    snprintf(buf, cap, "%.*s-%d%s", (int)(dot - out), out, k, dot);
    return buf;
}

/* A diffusion model's videos. */
/* A model of caption features: the prompt through the frozen encoder given, as ingot preprocess
 * captions encodes a caption (</s> appended, cut to the model's caption length), once that
 * encoder is the one the model's features came from (its record: width, line, weights' and
 * tokenizer's hashes; the line as the model keeps it, cut). *feat (malloc'd) [*len, D]. */
static ig_status encode_prompt(ig_ctx *ctx, const char *path, const ig_model_config *shape,
                               const sample_args *a, float **feat, int *len, ig_err *err) {
    ig_feature_encoder want, got;
    ig_model_caption_features(shape, &want);
    ig_cmd_text_encoder te;
    ig_status st =
        ig_cmd_text_encoder_open(&te, ctx, a->text_encoder, a->tokenizer, 0, 1,
                                 ig_model_caption_len(shape), IG_FEATURES_F32, a->flags.quiet, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "--text-encoder %s", a->text_encoder);
    got = te.ce.id;
    size_t n = strlen(want.describe);
    if (!n || !strncmp(got.describe, want.describe, n)) got.describe[n] = 0;
    char why[700];
    if (ig_feature_encoder_differs(&want, &got, why, sizeof why))
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "--text-encoder %s: %s was trained on the caption features of another "
                        "encoder (%s; the model's first): give the encoder its features were made "
                        "with (%s)",
                        a->text_encoder, path, why, *want.describe ? want.describe : "unnamed");
    if (st == IG_OK) st = ig_cmd_text_encoder_features(&te, a->prompt, feat, len, err);
    ig_cmd_text_encoder_close(&te);
    return st;
}

/* A model of latents' VAE (--vae): the one its latents came from (the same weights, so the same
 * latent channels and downsampling), opened to decode a frame of H x W at a time; *h x *w the
 * latents of such a frame. Nothing for a model of pixels (and --vae refused). */
static ig_status open_vae(ig_ctx *ctx, ig_backend *be, const char *path, const sample_args *a,
                          const ig_latent_vae *lv, unsigned H, unsigned W, int *h, int *w,
                          ig_model **out, ig_err *err) {
    *out = NULL;
    if (!lv && !*a->vae) return IG_OK;
    if (!lv)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "--vae: %s is a model of pixels (trained on frame shards): its videos "
                          "need no decoder",
                          path);
    unsigned f = lv->downsample ? lv->downsample : 1;
    if (!*a->vae)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s was trained on the latents of a VAE (%s; %u channels, 1/%u of the "
                          "frames a side): give --vae DIR, that VAE, to decode them to video",
                          path, *lv->describe ? lv->describe : "unnamed", lv->latent_channels, f);
    if (H % f || W % f)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "--size %ux%u: the model's latents are 1/%u of the frames a side: give "
                          "a size of multiples of %u",
                          H, W, f, f);
    ig_model_config vs;
    int C = 0;
    ig_status st = ig_model_read_shape(ctx, a->vae, &vs, err);
    if (st == IG_OK) st = ig_model_vae_latent_shape(&vs, (int)H, (int)W, h, w, &C, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "--vae %s", a->vae);
    const char *other = "--vae %s: %s was trained on the latents of another VAE (%s: the model's "
                        "VAE is %s): give the VAE its latents were made with";
    if ((uint32_t)C != lv->latent_channels || (unsigned)*h * f != H || (unsigned)*w * f != W) {
        char why[96];
        snprintf(why, sizeof why, "%d latent channels at 1/%u a side, the model's %u at 1/%u", C,
                 *h ? H / (unsigned)*h : 0, lv->latent_channels, f);
        return ig_err_set(err, IG_ERR_INVALID_ARG, other, a->vae, path, why,
                          *lv->describe ? lv->describe : "unnamed");
    }
    st =
        ig_model_open_weights(out, ctx, be, a->vae, 1, (int)(H * W), IG_WEIGHTS_DEFAULT, NULL, err);
    uint64_t id = 0;
    if (st == IG_OK) st = ig_model_params_xxh3(*out, &id, err);
    if (st == IG_OK && id != lv->weights_xxh3)
        st = ig_err_set(err, IG_ERR_INVALID_ARG, other, a->vae, path, "other weights",
                        *lv->describe ? lv->describe : "unnamed");
    if (st != IG_OK) {
        ig_model_free(*out);
        *out = NULL;
    }
    return st;
}

static ig_status sample_videos(ig_ctx *ctx, ig_backend *be, const char *path, const sample_args *a,
                               ig_err *err) {
    unsigned h = 0, w = 0;
    char x = 0, extra = 0;
    if (a->frames < 1 || sscanf(a->size, "%u%c%u%c", &h, &x, &w, &extra) != 3 || x != 'x' ||
        h < 1 || w < 1 || h > 8192 || w > 8192)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a video needs --frames F and --size HxW (e.g. --frames 8 --size "
                          "32x32), got --frames %d --size '%s'",
                          a->frames, a->size);
    if (!*a->output && !*a->png)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "nothing to write: give --output OUT.mp4 or --png SHEET.png (or both)");
    /* the outputs are judged before any work: an existing file needs --force, what is not a
     * regular file is refused, and no two of them may name the same file */
    char(*names)[4200] = calloc((size_t)a->num + 1, sizeof *names);
    const char **outs = calloc((size_t)a->num + 1, sizeof *outs);
    ig_status ost = names && outs ? IG_OK : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (int k = 0; ost == IG_OK && k <= a->num; k++) {
        const char *p =
            k < a->num
                ? (*a->output ? video_path(a->output, k, a->num, names[k], sizeof names[k]) : NULL)
                : (*a->png ? a->png : NULL);
        outs[k] = p;
        if (p) ost = ig_output_check(p, a->force, err);
    }
    if (ost == IG_OK) ost = ig_outputs_distinct(outs, (size_t)a->num + 1, err);
    free(outs);
    free(names);
    if (ost != IG_OK) return ost;
    ig_model_config shape;
    ig_status st = ig_model_read_shape(ctx, path, &shape, err);
    /* a model of latents samples the latents of the frames' size, and its VAE decodes them */
    ig_latent_vae lv;
    int latent = st == IG_OK && ig_model_latents(&shape, &lv), lh = (int)h, lw = (int)w;
    ig_model *vm = NULL;
    if (st == IG_OK) st = open_vae(ctx, be, path, a, latent ? &lv : NULL, h, w, &lh, &lw, &vm, err);
    int tokens = 0;
    if (st == IG_OK) st = ig_model_clip_tokens(&shape, a->frames, lh, lw, &tokens, err);
    int guided = (a->label >= 0 || *a->prompt) && a->cfg != 1.0, B = a->num * (guided ? 2 : 1);
    if (B > 64) B = guided ? 64 : 32; /* videos go through the model in chunks */
    ig_model *m = NULL;
    if (st == IG_OK)
        st = ig_model_open_weights(&m, ctx, be, path, B, tokens, (ig_weights)a->weights, NULL, err);
    if (st == IG_OK && (st = ig_model_check_finite(m, err)) != IG_OK)
        ig_err_prefix(err, st, "%s: its weights are not finite", path);
    size_t per = (size_t)a->frames * h * w * 3;
    uint8_t *rgb = st == IG_OK ? malloc((size_t)a->num * per) : NULL;
    if (st == IG_OK && !rgb) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    /* a caption model's prompt, in its caption tokenizer's ids */
    ig_tokenizer *tok = NULL;
    ig_encoder *enc = NULL;
    ig_tokens ids = {0};
    int conds = ig_model_conditions(&shape);
    /* or, for a model of caption features, the prompt's features [plen, D] */
    ig_feature_encoder fe;
    int D = ig_model_caption_features(&shape, &fe), plen = 0;
    float *pfeat = NULL;
    if (st == IG_OK && *a->prompt && !(conds & IG_COND_TEXT))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "--prompt: %s is not conditioned on captions (%s)",
                        path, conds & IG_COND_LABEL ? "it takes a class: give --label K" : "none");
    if (st == IG_OK && *a->text_encoder && !D)
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "--text-encoder: %s %s", path,
                        conds & IG_COND_TEXT ? "attends to caption tokens, not features: give "
                                               "--tokenizer, the one its clips' captions were "
                                               "made with"
                                             : "is not conditioned on captions");
    if (st == IG_OK && *a->prompt && D && !*a->text_encoder)
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "--prompt: %s was trained on caption features (%d wide, from %s): give "
                        "--text-encoder DIR, that encoder",
                        path, D, *fe.describe ? fe.describe : "an unnamed encoder");
    if (st == IG_OK && *a->prompt && D)
        st = encode_prompt(ctx, path, &shape, a, &pfeat, &plen, err);
    if (st == IG_OK && *a->prompt && !D && !*a->tokenizer)
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "--prompt needs --tokenizer, the one the clips' captions were made with");
    int by_ids = st == IG_OK && *a->prompt && !D;
    if (by_ids) st = ig_tokenizer_load(&tok, ctx, a->tokenizer, NULL, err);
    if (by_ids && st == IG_OK) st = ig_encoder_create(&enc, tok, err);
    if (by_ids && st == IG_OK)
        st = ig_encoder_encode(enc, a->prompt, strlen(a->prompt), 0, &ids, err);
    ig_video_sample_opts o = ig_video_sample_opts_default();
    o.prompt = ids.n ? ids.ids : NULL;
    o.prompt_features = pfeat;
    o.prompt_len = D ? plen : (int)ids.n;
    o.num = a->num, o.frames = a->frames, o.height = lh, o.width = lw;
    o.steps = a->steps, o.cfg = (float)a->cfg, o.label = a->label, o.seed = a->seed;
    /* videos go through the model B / (guided ? 2 : 1) at a time, each chunk for every step */
    int chunk = B / (guided ? 2 : 1), chunks = (a->num + chunk - 1) / chunk;
    progress pr = {.a = a, .t0 = ig_now(), .total = chunks * a->steps};
    o.shift = a->shift, o.progress = step_progress, o.user = &pr;
    /* a shape the model did not see (in tokens: the largest clip of its data) samples noise */
    if (st == IG_OK && shape.seq_len > 1 && tokens != shape.seq_len)
        fprintf(stderr,
                "ingot: warning: %s was trained on clips of at most %d tokens (the largest of its "
                "data); %d frames of %ux%u make %d: a shape its data did not hold gives noise, "
                "not video: sample the clips' own frames and size\n",
                path, shape.seq_len, a->frames, h, w, tokens);
    if (st == IG_OK && !latent) st = ig_model_sample_video(m, ctx, &o, rgb, err);
    if (st == IG_OK && latent) {
        size_t values = (size_t)a->num * (size_t)a->frames * (size_t)lh * (size_t)lw *
                        (size_t)lv.latent_channels;
        float *x0 = malloc(values * sizeof *x0);
        st = x0 ? ig_model_sample_values(m, ctx, &o, x0, err)
                : ig_err_set(err, IG_ERR_NOMEM, "out of memory for the latents");
        if (st == IG_OK && !a->flags.quiet)
            fprintf(stderr, "ingot: decoding %d frames through the VAE %s\n", a->num * a->frames,
                    a->vae);
        if (st == IG_OK)
            st = ig_model_vae_decode_rgb(vm, x0, a->num * a->frames, (int)h, (int)w,
                                         lv.scaling_factor, lv.shift_factor, rgb, err);
        free(x0);
    }
    for (int k = 0; st == IG_OK && *a->output && k < a->num; k++) {
        char buf[4200];
        const char *p = video_path(a->output, k, a->num, buf, sizeof buf);
        st = ig_video_write_mp4(p, rgb + (size_t)k * per, (uint32_t)a->frames, h, w,
                                (uint32_t)a->fps, 1, -1, err);
        if (st == IG_OK && !a->flags.quiet) printf("wrote %s\n", p);
    }
    if (st == IG_OK && *a->png) {
        st = ig_video_write_contact_sheet(a->png, rgb, (uint32_t)a->num, (uint32_t)a->frames, h, w,
                                          8, err);
        if (st == IG_OK && !a->flags.quiet) printf("wrote %s\n", a->png);
    }
    free(rgb);
    free(pfeat);
    ig_tokens_free(&ids);
    ig_encoder_free(enc);
    ig_tokenizer_free(tok);
    ig_model_free(m);
    ig_model_free(vm);
    return st;
}

typedef struct emit_state {
    const ig_tokenizer *tok;
    char *buf;
    size_t len, cap;
    int failed;
} emit_state;

static int emit(void *user, int32_t id) {
    emit_state *e = user;
    e->len = 0;
    /* the text goes on after the prompt: a SentencePiece piece's leading space is kept */
    if (ig_tokenizer_decode_next(e->tok, &id, 1, &e->buf, &e->len, &e->cap, NULL) != IG_OK)
        return 0;
    if (fwrite(e->buf, 1, e->len, stdout) != e->len || fflush(stdout) != 0) e->failed = 1;
    return e->failed;
}

int ig_cmd_sample(const ig_command *cmd, int argc, char **argv) {
    sample_args a = {0};
    ig_cmd_table tables[] = {{ig_cmd_common_keys, ig_cmd_n_common_keys, &a.flags},
                             {sample_keys, sizeof sample_keys / sizeof sample_keys[0], &a}};
    ig_cmd_spec spec = {tables, 2, NULL, 0, 0};
    ig_config *cfg = NULL;
    int first = 0;
    int rc = ig_cmd_parse(cmd, argc, argv, &spec, &cfg, &first);
    if (rc < 0 && argc - first != 1) rc = ig_cmd_usage_error(cmd, "expected one MODEL");
    /* a diffusion model's videos */
    ig_model_config shape = {0};
    ig_err serr = {0};
    ig_ctx *sctx = NULL;
    int video = 0;
    ig_status ss = rc < 0 ? ig_cmd_ctx(&sctx, &a.flags, &serr) : IG_OK;
    if (rc < 0 && ss == IG_OK &&
        (ss = ig_model_read_shape(sctx, argv[first], &shape, &serr)) == IG_OK)
        video = ig_model_io_of(&shape).sampler && !strcmp(ig_model_io_of(&shape).sampler, "video");
    /* a model that cannot be read: its error, unless the text options are all there (then the
     * text path reports it as it opens the model) */
    if (rc < 0 && ss != IG_OK && (!*a.tokenizer || !*a.prompt)) rc = ig_cmd_fail(&serr);
    /* a model whose objective samples nothing (a VAE encodes and decodes) */
    if (rc < 0 && ss == IG_OK && !ig_model_io_of(&shape).sampler)
        rc =
            ig_cmd_failf("%s: a %s model (objective %s) has no sampler: ingot sample generates "
                         "text or videos",
                         argv[first], ig_model_archs[shape.arch], ig_model_io_of(&shape).objective);
    if (rc < 0 && video) {
        ig_backend *vbe = NULL;
        ig_backend_opts vbo = ig_backend_opts_default();
        ig_status vs = ig_backend_create(&vbe, sctx, &vbo, &serr);
        if (vs == IG_OK) vs = sample_videos(sctx, vbe, argv[first], &a, &serr);
        rc = vs == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&serr);
        ig_backend_free(vbe);
    }
    ig_ctx_free(sctx);
    if (rc < 0 && !*a.tokenizer) rc = ig_cmd_usage_error(cmd, "--tokenizer T is required");
    if (rc < 0 && !*a.prompt) rc = ig_cmd_usage_error(cmd, "--prompt TEXT is required");
    if (rc >= 0) {
        ig_config_free(cfg);
        return rc;
    }
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_backend *be = NULL;
    ig_model *m = NULL;
    ig_tokenizer *tok = NULL;
    ig_encoder *enc = NULL;
    ig_tokens ids = {0};
    emit_state es = {0};
    int32_t eod = -1;
    ig_backend_opts bo = ig_backend_opts_default();
    ig_status st = ig_cmd_ctx(&ctx, &a.flags, &err);
    if (st == IG_OK) st = ig_tokenizer_load(&tok, ctx, a.tokenizer, NULL, &err);
    if (st == IG_OK) st = ig_encoder_create(&enc, tok, &err);
    if (st == IG_OK) st = ig_encoder_encode(enc, a.prompt, strlen(a.prompt), 0, &ids, &err);
    if (st == IG_OK) st = ig_backend_create(&be, ctx, &bo, &err);
    if (st == IG_OK)
        st = ig_model_open_weights(&m, ctx, be, argv[first], 1, 1, (ig_weights)a.weights, &eod,
                                   &err);
    if (st == IG_OK && (st = ig_model_check_finite(m, &err)) != IG_OK)
        ig_err_prefix(&err, st, "%s: its weights are not finite", argv[first]);
    if (st == IG_OK) {
        ig_sample_opts so = ig_sample_opts_default();
        so.max_tokens = a.tokens;
        so.temperature = (float)a.temperature;
        so.top_k = a.top_k;
        so.top_p = (float)a.top_p;
        so.seed = a.seed;
        so.stop_id = eod >= 0 ? eod : ig_tokenizer_eod(tok);
        es.tok = tok;
        fputs(a.prompt, stdout);
        size_t n = 0;
        st = ig_model_generate(m, ctx, ids.ids, ids.n, &so, emit, &es, &n, &err);
        fputc('\n', stdout);
        fflush(stdout);
        if (st == IG_OK && es.failed) st = ig_err_set(&err, IG_ERR_IO, "writing stdout failed");
        if (st == IG_OK && !a.flags.quiet)
            fprintf(stderr, "ingot: %zu prompt tokens, %zu generated\n", ids.n, n);
    }
    rc = st == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
    free(es.buf);
    ig_tokens_free(&ids);
    ig_encoder_free(enc);
    ig_tokenizer_free(tok);
    ig_model_free(m);
    ig_backend_free(be);
    ig_ctx_free(ctx);
    ig_config_free(cfg);
    return rc;
}
