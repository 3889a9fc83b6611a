/* cmd_encode_text.c - `ingot encode-text ENCODER --text TEXT --output FILE`: one caption's features
 * from a frozen text encoder (a T5 directory): the directory's tokenizer with the end-of-sequence
 * id appended, as T5 is fed, then train.h's ig_text_encoder; the features written as raw float32
 * [L, D]. Thin over ig_tokenizer_load and ig_text_encoder_*. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "preprocess/preprocess.h"
#include "train/train.h"

const char ig_usage_encode_text[] =
    "usage: ingot encode-text ENCODER --text TEXT --output FILE [--device cpu|cuda] [--force]\n"
    "\n"
    "Encodes TEXT with the frozen text encoder in ENCODER and writes its features to FILE:\n"
    "float32 little-endian [L, D] without a header (numpy.fromfile(FILE, '<f4').reshape(L, D)),\n"
    "L the text's tokens with the end-of-sequence token T5 is fed, D the encoder's d_model.\n"
    "Prints the encoder, the ids and the shape.\n"
    "\n"
    "ENCODER is a Hugging Face T5 directory (model_type t5: T5 v1.1 with feed_forward_proj\n"
    "gated-gelu, or v1.0 with relu): config.json, model.safetensors or the shards of its\n"
    "model.safetensors.index.json (an encoder-decoder T5ForConditionalGeneration file is read for\n"
    "its encoder; F32, BF16 or F16), and its tokenizer, spiece.model or tokenizer.json. The\n"
    "features are T5EncoderModel's last hidden state (after the final layer norm).\n"
    "\n"
    "Memory: the weights, 4 bytes a parameter in fp32 on the CPU - T5-XXL's encoder (4.76\n"
    "billion parameters) takes 19.05 GB, T5 v1.1 XL's 4.9 GB, large's 1.4 GB, base's 0.44 GB -\n"
    "or 2 bytes in bf16 on a GPU (9.5 GB for XXL); plus the activations and, while loading, the\n"
    "largest tensor twice on the host (1.05 GB for XXL). An encoder that does not fit what is "
    "free\n"
    "now is refused with the figures before anything is loaded.\n"
    "\n"
    "options:\n"
    "  --text TEXT        the text (a caption)\n"
    "  --output FILE      where the features go (refused when it exists, unless --force)\n"
    "  --device D         cpu (fp32, the default) or cuda (bf16)\n"
    "  --force            overwrite FILE\n"
    "  --threads N, --quiet, --verbose\n"
    "\n"
    "example:\n"
    "  ingot encode-text tests/data/golden/t5/gated --text \"A red fox.\" --output fox.f32\n";

static const char *const devices[] = {"cpu", "cuda", NULL};

typedef struct encode_args {
    const char *text, *output;
    int device, force;
    ig_common_flags flags;
} encode_args;

static const ig_cfg_key encode_keys[] = {
    IG_KEY_STRING("encode.text", encode_args, text, "", "the text"),
    IG_KEY_STRING("encode.output", encode_args, output, "", "where the features go"),
    IG_KEY_ENUM("encode.device", encode_args, device, "cpu", devices, "cpu (fp32) or cuda (bf16)"),
    IG_KEY_BOOL("encode.force", encode_args, force, "false", "overwrite the output"),
};

/* The text's ids through the encoder directory's tokenizer, ending with its eos id. */
static ig_status tokenize(ig_ctx *ctx, const char *dir, const char *text, ig_tokens *ids,
                          ig_err *err) {
    ig_tokenizer *tok = NULL;
    ig_encoder *enc = NULL;
    ig_status st = ig_tokenizer_load(&tok, ctx, dir, NULL, err);
    if (st == IG_OK) st = ig_encoder_create(&enc, tok, err);
    if (st == IG_OK)
        st = ig_encoder_encode(enc, text, strlen(text), IG_ENCODE_APPEND_EOS, ids, err);
    ig_encoder_free(enc);
    ig_tokenizer_free(tok);
    return st;
}

int ig_cmd_encode_text(const ig_command *cmd, int argc, char **argv) {
    encode_args a = {0};
    ig_cmd_table tables[] = {{ig_cmd_common_keys, ig_cmd_n_common_keys, &a.flags},
                             {encode_keys, sizeof encode_keys / sizeof encode_keys[0], &a}};
    ig_cmd_spec spec = {tables, 2, NULL, 0, 0};
    ig_config *cfg = NULL;
    int first = 0;
    int rc = ig_cmd_parse(cmd, argc, argv, &spec, &cfg, &first);
    if (rc < 0 && argc - first != 1) rc = ig_cmd_usage_error(cmd, "expected one ENCODER");
    if (rc < 0 && !ig_config_is_set(cfg, "encode.text"))
        rc = ig_cmd_usage_error(cmd, "--text TEXT is required");
    if (rc < 0 && !*a.output) rc = ig_cmd_usage_error(cmd, "--output FILE is required");
    if (rc >= 0) {
        ig_config_free(cfg);
        return rc;
    }
    const char *dir = argv[first];
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_backend *be = NULL;
    ig_text_encoder *enc = NULL;
    ig_tokens ids = {0};
    float *feat = NULL;
    ig_backend_opts bo = ig_backend_opts_default();
    if (a.device == 1) bo.kind = IG_BACKEND_CUDA, bo.act_type = IG_ACT_BF16;
    ig_status st = ig_cmd_ctx(&ctx, &a.flags, &err);
    if (st == IG_OK) st = tokenize(ctx, dir, a.text, &ids, &err);
    if (st == IG_OK) st = ig_backend_create(&be, ctx, &bo, &err);
    ig_text_encoder_opts o = ig_text_encoder_opts_default();
    o.max_batch = 1;
    o.max_len = (int)ids.n;
    if (st == IG_OK) st = ig_text_encoder_open(&enc, ctx, be, dir, &o, &err);
    size_t D = enc ? (size_t)ig_text_encoder_width(enc) : 0, bytes = ids.n * D * sizeof(float);
    if (st == IG_OK && !(feat = malloc(bytes ? bytes : 1)))
        st = ig_err_set(&err, IG_ERR_NOMEM, "out of memory");
    int len = (int)ids.n;
    const int32_t *p = ids.ids;
    if (st == IG_OK) st = ig_text_encoder_encode(enc, 1, &p, &len, &feat, &err);
    if (st == IG_OK) st = ig_write_file_atomic(a.output, feat, bytes, a.force, &err);
    if (st == IG_OK && !a.flags.quiet) {
        char what[512];
        printf("encoder: %s\nids:",
               ig_model_describe(ig_text_encoder_shape(enc), what, sizeof what));
        for (size_t i = 0; i < ids.n; i++) printf(" %d", (int)ids.ids[i]);
        printf("\n");
    }
    if (st == IG_OK) printf("%s: %zu tokens x %zu features (float32)\n", a.output, ids.n, D);
    rc = st == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
    free(feat);
    ig_tokens_free(&ids);
    ig_text_encoder_free(enc);
    ig_backend_free(be);
    ig_ctx_free(ctx);
    ig_config_free(cfg);
    return rc;
}
