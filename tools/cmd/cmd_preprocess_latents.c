/* cmd_preprocess_latents.c - `ingot preprocess latents`: frame shards through a VAE's encoder into
 * latent shards. Thin over ig_preprocess_latents (preprocess.h), whose encoder this file makes of
 * train.h's ig_vae_encoder: the memory stated and checked, the VAE opened, its identity, factors
 * and shape handed back for the manifest. With --text-encoder the same run then makes the clips'
 * caption features (ig_preprocess_captions, as `ingot preprocess captions` does) into
 * OUT.features. Dispatched from `ingot preprocess`; under mpirun the ranks split the clips and
 * rank 0 writes the shard lists.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "cmd_text_encoder.h"
#include "comm/comm.h"
#include "preprocess/preprocess.h"
#include "train/train.h"

const char ig_usage_preprocess_latents[] =
    "usage: ingot preprocess latents --clips PREFIX --vae DIR --output-prefix OUT\n"
    "                                [--dtype fp32|bf16] [--batch N] [--device cpu|cuda]\n"
    "                                [--text-encoder DIR [--caption-len N]\n"
    "                                [--features-dtype fp32|bf16]] [--threads N] [--force]\n"
    "                                [--quiet]\n"
    "\n"
    "Encodes every clip of frame shards (ingot preprocess video) with a VAE's encoder and stores\n"
    "the posterior of each clip, so that a latent model can draw a fresh latent each time it "
    "reads\n"
    "one: OUT.latents holds per clip [F, h, w, 2C] values, the C means then the C log-variances\n"
    "of every latent position (h = H / f, w = W / f, f the VAE's downsampling), OUT.lclips the\n"
    "index, OUT.json the manifest: the VAE (its path, shape, the xxh3 of its weights, latent\n"
    "channels, downsampling, scaling_factor and shift_factor), the source clips' videos and\n"
    "bucket table; and OUT.captions, the captions the clips carry (token documents). Every clip\n"
    "keeps its shape, label, bucket, caption and source frames. Frames whose sides f does not\n"
    "divide are refused, naming the clip.\n"
    "\n"
    "The memory it takes (the VAE's weights and the activations of a pass, its loading buffers,\n"
    "the largest clip's frames and moments) is stated before anything is loaded and refused when\n"
    "it does not fit. A run that is killed leaves OUT.incomplete: its files are refused by every\n"
    "reader, and the next run removes them and starts over. Under mpirun every rank encodes a\n"
    "contiguous share of the clips into OUT_rRRRR and rank 0 writes the list OUT.shards.json; the\n"
    "values are the same as one process's.\n"
    "\n"
    "With --text-encoder DIR (a frozen T5, as 'ingot preprocess captions' takes it) the same run\n"
    "then encodes every clip's caption into the caption-feature shard OUT.features, the features\n"
    "of the source clips, which the latent clips follow one for one: what 'ingot preprocess\n"
    "captions --clips PREFIX --text-encoder DIR --output-prefix OUT.features' would write. An\n"
    "existing OUT.features is refused before anything is encoded unless --force is given.\n"
    "\n"
    "options:\n"
    "  --clips PREFIX      the frame shards: a shard or a shard list\n"
    "  --vae DIR           the VAE (model.arch vae): a run directory, a checkpoint or an export\n"
    "                      (a diffusers AutoencoderKL directory)\n"
    "  --output-prefix OUT where to write (the directory must exist)\n"
    "  --dtype D           fp32 (the default) or bf16 (half the bytes, rounded to nearest even)\n"
    "  --batch N           frames a pass encodes (default 4)\n"
    "  --device D          cpu (fp32, the default) or cuda (bf16 activations)\n"
    "  --text-encoder DIR  also the clips' caption features, into OUT.features\n"
    "  --caption-len N     with --text-encoder: tokens a caption keeps (default 120)\n"
    "  --features-dtype D  with --text-encoder: fp32 (default) or bf16\n"
    "  --force             replace an existing complete output\n"
    "  --threads N, --quiet, --verbose\n"
    "\n"
    "examples:\n"
    "  ingot preprocess latents --clips out/clips --vae out/vae-tiny-diffusers \\\n"
    "      --output-prefix out/latents\n"
    "  mpirun -np 2 ingot preprocess latents --clips out/clips --vae out/vae-tiny \\\n"
    "      --output-prefix out/latents --dtype bf16\n";

static const char *const dtypes[] = {"fp32", "bf16", NULL};
static const char *const devices[] = {"cpu", "cuda", NULL};

typedef struct latent_args {
    const char *clips, *vae, *output, *text_encoder;
    int dtype, batch, device, force, caption_len, features_dtype;
    ig_common_flags flags;
} latent_args;

static const ig_cfg_key latent_keys[] = {
    IG_KEY_STRING("latents.clips", latent_args, clips, "", "the frame shards"),
    IG_KEY_STRING("latents.vae", latent_args, vae, "", "the VAE: a run, a checkpoint or an export"),
    IG_KEY_STRING("latents.output_prefix", latent_args, output, "", "where to write"),
    IG_KEY_ENUM("latents.dtype", latent_args, dtype, "fp32", dtypes, "fp32 or bf16"),
    IG_KEY_INT("latents.batch", latent_args, batch, "4", 1, 4096, "frames a pass encodes"),
    IG_KEY_ENUM("latents.device", latent_args, device, "cpu", devices, "cpu (fp32) or cuda (bf16)"),
    IG_KEY_BOOL("latents.force", latent_args, force, "false", "replace an existing output"),
    IG_KEY_STRING("latents.text_encoder", latent_args, text_encoder, "",
                  "a frozen T5: the clips' caption features too, into OUT.features"),
    IG_KEY_INT("latents.caption_len", latent_args, caption_len, "0", 0, 4096,
               "with text_encoder: tokens a caption keeps (0: 120)"),
    IG_KEY_ENUM("latents.features_dtype", latent_args, features_dtype, "fp32", dtypes,
                "with text_encoder: fp32 or bf16"),
};

/* the encoder ig_preprocess_latents runs */
typedef struct vae_user {
    ig_ctx *ctx;
    ig_backend *be;
    const char *path;
    int batch, quiet, rank;
    ig_vae_encoder *enc;
} vae_user;

static ig_status vae_open(void *user, uint32_t height, uint32_t width, uint64_t buffers,
                          ig_latent_vae *vae, ig_err *err) {
    vae_user *u = user;
    ig_vae_encoder_opts o = {.batch = u->batch, .height = (int)height, .width = (int)width};
    ig_vae_encoder_memory mem;
    ig_model_config shape;
    ig_status st =
        ig_vae_encoder_plan(u->ctx, u->path, &o, ig_backend_act_size(u->be), &mem, &shape, err);
    if (st != IG_OK) return st;
    uint64_t total = mem.device + mem.host + buffers;
    const char *what = NULL;
    uint64_t limit = ig_memory_limit(&what);
    char t[32], w[32], a[32], h[32], b[32], l[32];
    ig_format_bytes((double)total, t, sizeof t);
    ig_format_bytes((double)mem.weights, w, sizeof w);
    ig_format_bytes((double)mem.acts, a, sizeof a);
    ig_format_bytes((double)mem.host, h, sizeof h);
    ig_format_bytes((double)buffers, b, sizeof b);
    ig_format_bytes((double)limit, l, sizeof l);
    if (!u->quiet && u->rank == 0)
        fprintf(stderr,
                "memory: %s a process: the VAE's weights %s, activations %s (%d frames of %ux%u "
                "a pass), loading and checksum %s, the largest clip's frames and moments %s; %s "
                "available (%s)\n",
                t, w, a, o.batch, height, width, h, b, l, what ? what : "?");
    if (ig_backend_kind_of(u->be) == IG_BACKEND_CPU)
        st = ig_memory_check(total, "encoding the clips",
                             "encode fewer frames at once (--batch) or on a machine with more "
                             "memory",
                             err);
    if (st == IG_OK) st = ig_vae_encoder_open(&u->enc, u->ctx, u->be, u->path, &o, err);
    if (st == IG_OK) st = ig_vae_encoder_identity(u->enc, &vae->weights_xxh3, err);
    if (st != IG_OK) return st;
    int C = 0, f = 0;
    ig_vae_encoder_factors(u->enc, &C, &f, &vae->scaling_factor, &vae->shift_factor);
    vae->latent_channels = (uint32_t)C;
    vae->downsample = (uint32_t)f;
    ig_model_describe(ig_vae_encoder_shape(u->enc), vae->describe, sizeof vae->describe);
    return IG_OK;
}

static ig_status vae_encode(void *user, const uint8_t *frames, uint32_t N, uint32_t H, uint32_t W,
                            float *moments, ig_err *err) {
    vae_user *u = user;
    return ig_vae_encoder_encode(u->enc, frames, (int)N, (int)H, (int)W, moments, err);
}

/* The spread of the latent means every rank wrote, and the scaling that would make a latent
 * model's x0 = scaling z unit-variance (what SD3 and Open-Sora set their VAE's scaling_factor to;
 * SD's 0.18215 is that of SD's VAE). */
static void latent_spread(ig_comm *comm, const ig_latent_stats *st, const char *who) {
    double v[3] = {st->means, st->mean_sum, st->mean_sq};
    ig_err err = {0};
    if (comm && ig_comm_size(comm) > 1 &&
        ig_comm_allreduce(comm, v, v, 3, IG_COMM_F64, IG_COMM_SUM, &err) != IG_OK)
        return;
    if (v[0] < 2) return;
    double mean = v[1] / v[0], var = v[2] / v[0] - mean * mean, sd = var > 0 ? sqrt(var) : 0;
    printf("%slatent means: mean %.4g, std %.4g over every clip: x0 = scaling_factor z has std "
           "%.3g with the VAE's %g%s",
           who, mean, sd, st->vae.scaling_factor * sd, st->vae.scaling_factor, sd > 0 ? "" : "\n");
    if (sd > 0) printf("; %.3g would make it 1 (model.scaling_factor of the VAE)\n", 1.0 / sd);
}

int ig_cmd_preprocess_latents(const ig_command *cmd, int argc, char **argv) {
    static const ig_command me = {"preprocess latents", "", ig_usage_preprocess_latents, NULL};
    (void)cmd;
    latent_args a = {0};
    ig_cmd_table tables[] = {{ig_cmd_common_keys, ig_cmd_n_common_keys, &a.flags},
                             {latent_keys, sizeof latent_keys / sizeof latent_keys[0], &a}};
    ig_cmd_spec spec = {tables, 2, NULL, 0, 0};
    ig_config *cfg = NULL;
    int first = 0;
    int rc = ig_cmd_parse(&me, argc, argv, &spec, &cfg, &first);
    if (rc < 0 && first < argc)
        rc = ig_cmd_usage_error(&me, "unexpected argument '%s'", argv[first]);
    if (rc < 0 && !*a.clips) rc = ig_cmd_usage_error(&me, "no input: give --clips PREFIX");
    if (rc < 0 && !*a.vae) rc = ig_cmd_usage_error(&me, "no VAE: give --vae DIR");
    if (rc < 0 && !*a.output) rc = ig_cmd_usage_error(&me, "no output: give --output-prefix OUT");
    if (rc < 0 && !*a.text_encoder && (a.caption_len || a.features_dtype))
        rc = ig_cmd_usage_error(&me,
                                "--caption-len and --features-dtype go with --text-encoder DIR");
    if (rc >= 0) {
        ig_config_free(cfg);
        return rc;
    }
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_comm *comm = NULL;
    ig_backend *be = NULL;
    ig_latent_stats st = {0};
    ig_backend_opts bo = ig_backend_opts_default();
    if (a.device == 1) bo.kind = IG_BACKEND_CUDA, bo.act_type = IG_ACT_BF16;
    ig_status s = ig_cmd_ctx(&ctx, &a.flags, &err);
    if (s == IG_OK) s = ig_comm_world(&comm, ctx, "preprocess latents", &err);
    int world = comm ? ig_comm_size(comm) : 1, rank = comm ? ig_comm_rank(comm) : 0;
    if (s == IG_OK) s = ig_backend_create(&be, ctx, &bo, &err);
    /* the caption features' encoder and output first: what would refuse them refuses the run
     * before a clip is encoded */
    ig_cmd_text_encoder te = {0};
    char features[4200] = "";
    if (*a.text_encoder) snprintf(features, sizeof features, "%s.features", a.output);
    if (s == IG_OK && *features && !a.force && ig_feature_shard_is(features))
        s = ig_err_set(&err, IG_ERR_EXISTS,
                       "%s exists (caption features): give --force to replace it and the latents",
                       features);
    if (s == IG_OK && *features)
        s = ig_cmd_text_encoder_open(&te, ctx, a.text_encoder, NULL, a.device, 8,
                                     a.caption_len ? a.caption_len : 120,
                                     a.features_dtype == 1 ? IG_FEATURES_BF16 : IG_FEATURES_F32,
                                     a.flags.quiet || rank > 0, &err);
    vae_user u = {.ctx = ctx,
                  .be = be,
                  .path = a.vae,
                  .batch = a.batch,
                  .quiet = a.flags.quiet,
                  .rank = rank};
    ig_latent_encoder enc = {.user = &u, .open = vae_open, .encode = vae_encode};
    ig_latent_opts o = {.clips = a.clips,
                        .output_prefix = a.output,
                        .vae_path = a.vae,
                        .encoder = &enc,
                        .dtype = a.dtype == 1 ? IG_LATENT_BF16 : IG_LATENT_F32,
                        .overwrite = a.force,
                        .progress = !a.flags.quiet,
                        .comm = comm};
    if (s == IG_OK) s = ig_preprocess_latents(ctx, &o, &st, &err);
    ig_captions_stats fs = {0};
    if (s == IG_OK && *features) {
        const char *clips[] = {a.clips};
        ig_captions_opts co = {.clips = clips,
                               .n_clips = 1,
                               .output_prefix = features,
                               .features = &te.fo,
                               .overwrite = a.force,
                               .progress = !a.flags.quiet,
                               .comm = comm};
        s = ig_preprocess_captions(ctx, &co, &fs, &err);
    }
    if (s == IG_OK && !a.flags.quiet) {
        char who[32] = "", bytes[32];
        if (world > 1) snprintf(who, sizeof who, "rank %d: ", rank);
        ig_format_bytes((double)st.bytes, bytes, sizeof bytes);
        double secs = st.seconds > 1e-9 ? st.seconds : 1e-9;
        printf("%sencoded %llu clips, %llu frames in %.2f s (%.1f frames/s): %s of %s latents, "
               "%u channels (mean | logvar) at 1/%u of the frames' size\n",
               who, (unsigned long long)st.clips, (unsigned long long)st.frames, st.seconds,
               (double)st.frames / secs, bytes, a.dtype == 1 ? "bf16" : "fp32",
               2 * st.vae.latent_channels, st.vae.downsample);
        for (size_t i = 0; i < st.n_shard_prefixes; i++)
            printf("%s  %s\n", who, st.shard_prefixes[i]);
        latent_spread(comm, &st, who);
        if (*features)
            printf("%scaption features: %llu clips, %llu captions encoded (%llu cut to %d tokens): "
                   "%s\n",
                   who, (unsigned long long)fs.clips, (unsigned long long)fs.encoded,
                   (unsigned long long)fs.cut, te.fo.caption_len, features);
    }
    rc = s == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
    fflush(stdout);
    fflush(stderr);
    ig_latent_stats_clear(&st);
    ig_captions_stats_clear(&fs);
    ig_cmd_text_encoder_close(&te);
    ig_vae_encoder_free(u.enc);
    ig_backend_free(be);
    ig_comm_free(comm);
    ig_ctx_free(ctx);
    ig_config_free(cfg);
    return rc;
}
