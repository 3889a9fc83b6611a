#!/usr/bin/env bash
# vae.sh - the VAE family (model.arch vae: diffusers' AutoencoderKL, per frame) end to end: clip
# shards of the bundled videos; a few training steps whose loss goes down, the banner naming the
# model; a run stopped at a checkpoint and resumed gives the uninterrupted run's losses bit for
# bit; ingot eval prints reconstruction, kl, psnr and the loss, equal to the trainer's validation
# loss (--weights raw); the export is diffusers' pair of files (config.json with _class_name
# AutoencoderKL, diffusion_pytorch_model.safetensors) and evaluates as the checkpoint does, and a
# run starts from it with model.init_from (another shape refused, naming the key); --noise
# (a file of eps [N, F, h, w, C] written here) evaluates with exactly that noise (the same file:
# the same lines; another: another reconstruction, the same kl); refused: a noise file of another
# shape, tensor, pipeline and Ulysses parallelism (each with its reason), a config.json field
# ingot cannot honour, frames the downsampling does not divide, ingot sample (a VAE samples
# nothing); ingot plan --clip takes a clip's pixels; and a file of Stable Diffusion's
# VAE's shape (sd-vae-ft-ema, written by test_train_vae) evaluates through ingot eval as a model of
# 83,653,863 parameters.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin cli_vae
SRC=${IG_SOURCE_DIR:?}
cd "$T" || die "cd"

"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips \
    --frames 4 --stride 2 --size 32x32 --clips-per-video 2 --quiet >pre.log 2>&1 ||
    die "preprocess video ($(tail -c 300 pre.log))"
cat >vae.yaml <<'EOF'
model: {arch: vae, block_out_channels: [16, 32, 32], layers_per_block: 1, latent_channels: 4,
        norm_groups: 8, seed: 1}
data: {path: [clips], seed: 5}
train: {micro_batch: 2, global_batch: 4, steps: 8, run_dir: run}
optim: {lr: 2.0e-3, min_lr: 1.0e-4, warmup: 1, weight_decay: 0}
vae: {kl_weight: 1.0e-3}
eval: {every: 4, batches: 2}
ckpt: {every: 4, keep: 2}
log: {every: 1}
EOF
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl" | cut -d: -f2; }
vals() { grep -o '"val_loss":[^,}]*' "$1/metrics.jsonl" | cut -d: -f2; }

# ---- training -------------------------------------------------------------------------------
check_rc "train 8 steps" 0 "$ING" train vae.yaml --threads 2
expect "banner: the family and its blocks" "vae: 8 layers, 1 heads, d_model 32; blocks [16, 32, 32]" "$out"
expect "banner: clips of pixels" "2 clips x 4096 tokens per micro-batch" "$out"
check "8 losses" test "$(losses run | wc -l)" = 8
check "the loss goes down" awk -v a="$(losses run | head -1)" -v b="$(losses run | tail -1)" \
    'BEGIN { exit !(b < a) }'

# resume from step 4 under another thread count: the same losses, bit for bit
mkdir -p res/ckpt && cp -r run/ckpt/step_00000004 res/ckpt/ && head -4 run/metrics.jsonl >res/metrics.jsonl
check_rc "resume from step 4" 0 "$ING" train vae.yaml --threads 1 --set train.run_dir=res --resume res
check "resumed: steps 5-8 bit for bit" test "$(losses run | tail -4)" = "$(losses res | tail -4)"
check "resumed: the validation loss at step 8 too" test "$(vals run | tail -1)" = "$(vals res | tail -1)"
check_rc "resumed: the same weights" 0 "$ING" ckpt diff run res --tolerance 0

# ---- eval -----------------------------------------------------------------------------------
check_rc "eval the run (data.seed 5: the trainer's validation noise)" 0 "$ING" eval run --data clips \
    --batches 2 --micro-batch 2 --seed 5
for l in reconstruction kl psnr loss; do
    expect "eval: a '$l' line" "$(printf '\n%s ' "$l")" "$(printf '\n%s' "$out")"
done
expect "eval: the model's size" "a VAE of" "$out"
expect "eval: what the loss is" "loss = reconstruction + 1e-06 x kl" "$out"
rec=$(grep '^reconstruction ' <<<"$out" | cut -d' ' -f2)
check "eval: the loss line is reconstruction + 1e-6 kl" awk -v l="$(grep '^loss ' <<<"$out" | cut -d' ' -f2)" \
    -v r="$rec" -v k="$(grep '^kl ' <<<"$out" | cut -d' ' -f2)" \
    'BEGIN { d = l - (r + 1e-6 * k); if (d < 0) d = -d; exit !(d <= 2e-6) }'

check "eval: its terms make the trainer's validation loss (vae.kl_weight 1e-3)" \
    awk -v v="$(vals run | tail -1)" -v r="$rec" -v k="$(grep '^kl ' <<<"$out" | cut -d' ' -f2)" \
    'BEGIN { d = v - (r + 1e-3 * k); if (d < 0) d = -d; exit !(d <= 1e-6 * v) }'
run_out=$out

# ---- export ---------------------------------------------------------------------------------
check_rc "export" 0 "$ING" ckpt export run --output exp
check "export: diffusers' files" test -f exp/diffusion_pytorch_model.safetensors -a -f exp/config.json
check "export: no model.safetensors" test ! -e exp/model.safetensors
expect "export: _class_name" '"_class_name": "AutoencoderKL"' "$(cat exp/config.json)"
check_rc "eval the export" 0 "$ING" eval exp --data clips --batches 2 --micro-batch 2 --seed 5
check "the export evaluates as the checkpoint" test "$(grep -v '^weights' <<<"$out")" = \
    "$(grep -v '^weights' <<<"$run_out")"
check_rc "the export reads back to the same weights" 0 "$ING" ckpt diff run exp --tolerance 0

# model.init_from the export: a run starts from its weights (at lr 0 they stay them), and a
# configuration of another shape is refused naming the key
check_rc "model.init_from the export (lr 0)" 0 "$ING" train vae.yaml --set train.run_dir=init \
    --set model.init_from=exp --set train.steps=1 --set optim.lr=0 --set optim.min_lr=0
check_rc "init_from: the export's weights" 0 "$ING" ckpt diff init exp --tolerance 0
check_rc "init_from another shape" 1 "$ING" train vae.yaml --set train.run_dir=init2 \
    --set model.init_from=exp --set model.latent_channels=8
expect "init_from: what differs" "model.latent_channels differs" "$err"

# ---- --noise --------------------------------------------------------------------------------
# a safetensors file of one tensor noise F32 [N, F, h, w, C], every value the 4 bytes $7 (octal
# escapes: none may be 0 or a newline) or zero
noise_file() { # OUT N F h w C [BYTES]
    local out=$1 n=$(($2 * $3 * $4 * $5 * $6)) hdr len
    hdr=$(printf '{"noise":{"dtype":"F32","shape":[%d,%d,%d,%d,%d],"data_offsets":[0,%d]}}' \
        "$2" "$3" "$4" "$5" "$6" $((4 * n)))
    while [ $((${#hdr} % 8)) -ne 0 ]; do hdr="$hdr "; done
    len=${#hdr}
    {
        printf "$(printf '\\%03o\\%03o\\%03o\\%03o\\000\\000\\000\\000' $((len & 255)) \
            $((len >> 8 & 255)) $((len >> 16 & 255)) $((len >> 24 & 255)))"
        printf '%s' "$hdr"
        if [ $# -ge 7 ]; then yes "$(printf "$7")" | tr -d '\n' | head -c $((4 * n)); else
            head -c $((4 * n)) /dev/zero; fi
    }>"$out"
}
noise_file zeros.st 3 4 8 8 4
noise_file ones.st 3 4 8 8 4 '\315\314\214\077' # 1.1f
check_rc "eval --noise (zeros: z = the mean)" 0 "$ING" eval exp --data clips --noise zeros.st --micro-batch 2
z1=$out
expect "eval --noise: 3 clips" "3 clips with the noise of zeros.st" "$out"
check_rc "eval --noise again" 0 "$ING" eval exp --data clips --noise zeros.st --micro-batch 3
check "the same noise, the same lines (micro-batches of 2 or 3)" test "$(grep -v '^weights' <<<"$z1")" = \
    "$(grep -v '^weights' <<<"$out")"
check_rc "eval --noise (1.1 everywhere)" 0 "$ING" eval exp --data clips --noise ones.st --micro-batch 2
check "another noise, another reconstruction" test "$(grep '^reconstruction' <<<"$z1")" != \
    "$(grep '^reconstruction' <<<"$out")"
check "another noise, the same kl" test "$(grep '^kl' <<<"$z1")" = "$(grep '^kl' <<<"$out")"
noise_file bad.st 3 4 8 8 3
check_rc "a noise file of another shape" 1 "$ING" eval exp --data clips --noise bad.st
expect "refused, naming both shapes" "tensor \"noise\" is [3, 4, 8, 8, 3]; clip 0's latents are [4, 8, 8, 4]" "$err"

# ---- refusals -------------------------------------------------------------------------------
check_rc "parallel.tp 2" 1 "$ING" config check vae.yaml --schema train --set parallel.tp=2
expect "tp: the reason" "model.arch vae is not tensor-parallel" "$err"
check_rc "parallel.pp 2" 1 "$ING" config check vae.yaml --schema train --set parallel.pp=2
expect "pp: the reason" "its loss has a term in the middle of the model" "$err"
check_rc "Ulysses" 1 "$ING" config check vae.yaml --schema train --set parallel.sp_mode=ulysses \
    --set parallel.sp_size=2
expect "ulysses: refused" "parallel.sp_mode ulysses" "$err"
cp -r exp badcfg
sed -i 's/"act_fn": "silu"/"act_fn": "silu", "norm_type": "spatial"/' badcfg/config.json
check_rc "a config.json field ingot cannot honour" 1 "$ING" eval badcfg --data clips --batches 1
expect "refused, naming the field" 'field "norm_type": ingot'"'"'s AutoencoderKL cannot honour it' "$err"
"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix odd \
    --frames 2 --stride 2 --size 30x30 --clips-per-video 1 --quiet >pre2.log 2>&1 || fail "odd clips"
check_rc "frames of 30x30 (3 blocks: sides a multiple of 4)" 1 "$ING" train vae.yaml \
    --set data.path=[odd] --set train.run_dir=odd
expect "refused with the numbers" "frames of 30x30: the VAE's 2 downsamplings" "$err"

check_rc "ingot sample: a VAE samples nothing" 1 "$ING" sample run --frames 4 --size 32x32
expect "sample: refused, saying why" "a vae model (objective vae) has no sampler" "$err"
check_rc "ingot plan --clip: a clip's pixels" 0 "$ING" plan vae.yaml --gpus 1 --gpu cpu --clip 4x32x32
expect "plan: 4096 pixels a clip" "clips of 4096 tokens per step" "$out"
check_rc "ingot plan --clip the downsampling does not divide" 2 "$ING" plan vae.yaml --gpus 1 \
    --gpu cpu --clip 4x30x32
expect "plan: refused with the numbers" "frames of 30x32: the VAE's 2 downsamplings" "$err"

# ---- Stable Diffusion's VAE's shape -----------------------------------------------------------
if [ -x "${IG_BUILD_DIR:-}/test_train_vae" ]; then
    mkdir sd
    IG_VAE_SD_DIR=$T/sd "$IG_BUILD_DIR/test_train_vae" >sd.log 2>&1 ||
        fail "writing the SD-shaped file ($(tail -c 300 sd.log))"
    check "sd-vae-ft-ema's shape: 335 MB of weights" \
        test "$(stat -c %s sd/diffusion_pytorch_model.safetensors)" -gt 334000000
    noise_file sdz.st 1 4 4 4 4
    check_rc "it evaluates (one clip, 8x down)" 0 "$ING" eval sd --data clips --noise sdz.st --threads 2
    expect "83,653,863 parameters" "a VAE of 83653863 parameters" "$out"
    expect "its lines" "psnr " "$out"
    rm -rf sd
else
    fail "test_train_vae is not built in IG_BUILD_DIR (${IG_BUILD_DIR:-unset})"
fi
ig_end
