#!/usr/bin/env bash
# latents.sh - `ingot preprocess latents` end to end: clip shards of two shapes (Open-Sora buckets
# over a 64x48 and a 48x64 video, with captions and labels) encoded by the golden VAE (a diffusers
# directory) into a latent shard: each clip in its own latent shape, labels, buckets and captions
# carried over; inspect shows the shapes, dtype and VAE, --clip K --raw FILE writes the stored
# mean | logvar as float32 [F, h, w, 2C] (exactly the shard's bytes; test_latent_shard checks that
# they are what the encoder gives); verify checks it; bf16 halves the data; a VAE given as a run
# directory, its checkpoint and its export is one VAE (the same identity, the same latents); a rerun
# is refused without --force and gives the same bytes with it; a killed run's leftovers are
# refused by readers and removed by the next run; outputs that are not regular files are never
# replaced; memory that does not fit, clips the downsampling does not divide, a model that is not a
# VAE and bad options are refused with one clear line; with --text-encoder the same run writes the
# clips' caption features, byte for byte what preprocess captions writes of the same clips.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin cli_latents
SRC=${IG_SOURCE_DIR:?}
command -v ffmpeg >/dev/null || { echo "skipped: the ffmpeg CLI is not installed (tools/install-deps.sh)"; exit 77; }
cd "$T" || die "cd"
FF=(ffmpeg -nostdin -hide_banner -loglevel error -y)
"${FF[@]}" -f lavfi -i testsrc2=size=64x48:rate=25:duration=1 -c:v libx264 a.mp4 || die "ffmpeg"
"${FF[@]}" -f lavfi -i testsrc2=size=48x64:rate=25:duration=1 -c:v libx264 b.mp4 || die "ffmpeg"
# clips of two shapes: a frame shard of each video (wide, tall) and a list over both, as a
# two-rank preprocess video writes it
printf 'path,text,label\na.mp4,"a test pattern, wide",3\n' >ma.csv
printf 'path,text,label\nb.mp4,a tall one,5\n' >mb.csv
"$ING" preprocess video --manifest ma.csv --output-prefix clips_r0000 --frames 4 --size 24x32 \
    --clips-per-video 2 --tokenizer "$SRC/data/gpt2" --quiet >pre.log 2>&1 || die "preprocess a"
"$ING" preprocess video --manifest mb.csv --output-prefix clips_r0001 --frames 4 --size 32x24 \
    --clips-per-video 2 --tokenizer "$SRC/data/gpt2" --quiet >pre.log 2>&1 || die "preprocess b"
entry() {
    printf '{"prefix": "%s", "clips": 2, "frames": 8, %s, %s}' "$1" \
        "$(grep -o '"frames_xxh3": "[0-9a-f]*"' "$1.json")" "$(grep -o '"clips_xxh3": "[0-9a-f]*"' "$1.json")"
}
printf '{"format": "ingot-video-shard-list", "version": 1, "clips": 4, "frames": 16, "shards": [%s, %s]}\n' \
    "$(entry clips_r0000)" "$(entry clips_r0001)" >clips.shards.json
"$ING" verify clips --quiet || die "the clip list does not verify"
VAE=$SRC/tests/data/golden/vae/a # a diffusers AutoencoderKL directory: 2x down, 4 channels

# ---- a latent shard -------------------------------------------------------------------------
check_rc "preprocess latents" 0 "$ING" preprocess latents --clips clips --vae "$VAE" \
    --output-prefix lat --threads 2
expect "the memory is stated first" "memory: " "$err"
expect "it says what it did" "encoded 4 clips, 16 frames" "$out"
expect "and the latents' spread, for the VAE's scaling_factor" "latent means: mean " "$out"
expect "with the factor that makes x0 unit-variance" " would make it 1 (model.scaling_factor of the VAE)" "$out"
check "no marker left" test ! -e lat.incomplete
check_rc "verify" 0 "$ING" verify lat
expect "verify names it" "ok (latent shard, 1 shard, 4 clips, 16 frames)" "$out"
check_rc "verify with an extension" 0 "$ING" verify lat.lclips
check_rc "inspect" 0 "$ING" inspect lat
expect "inspect: the dtype and channels" "fp32, 8 channels a position: 4 means then 4 log-variances" "$out"
expect "inspect: the VAE" "vae        $VAE: vae:" "$out"
expect "inspect: two shards of clips, one of latents" "latent shard (1 shard)" "$out"
expect "inspect: the factors" "downsampling 2, scaling_factor 0.18215, shift_factor 0" "$out"
expect "inspect: the wide clips' latent shape" "shape      [4, 12, 16, 8]: 2 clips" "$out"
expect "inspect: the tall clips' latent shape" "shape      [4, 16, 12, 8]: 2 clips" "$out"
expect "inspect: captions" "captions   4 clips" "$out"
expect "inspect: labels" "labels     4 clips" "$out"
check_rc "inspect --json" 0 "$ING" inspect lat --json
expect "json: latent channels" '"latent_channels": 4' "$out"
check "the caption shard verifies" "$ING" verify lat.captions --quiet

# buckets carry over (Open-Sora's, of the clip shards)
printf 'bucket_config:\n  "48px": {4: [1.0, 2]}\n' >b.yaml
"$ING" preprocess video --manifest ma.csv --output-prefix bk --buckets b.yaml --quiet >pre.log 2>&1 ||
    die "preprocess buckets"
check_rc "latents of bucketed clips" 0 "$ING" preprocess latents --clips bk --vae "$VAE" \
    --output-prefix lbk --quiet
check_rc "inspect their clip" 0 "$ING" inspect lbk --clip 0
expect "the clip's bucket" "bucket     48px/4/" "$out"
check_rc "inspect the shard" 0 "$ING" inspect lbk
expect "the bucket table" "bucket     48px/4/" "$out"

# clip 0: its shape, provenance and stored values
check_rc "inspect --clip 0 --raw" 0 "$ING" inspect lat --clip 0 --raw c0.f32
expect "clip 0: its latent shape" "latent     [4, 12, 16, 8] fp32" "$out"
expect "clip 0: its source" "a.mp4" "$out"
expect "clip 0: its label" "label      3" "$out"
expect "clip 0: its caption" "caption    document 0 of lat.captions" "$out"
check "raw: F x h x w x 2C float32" test "$(stat -c %s c0.f32)" -eq $((4 * 12 * 16 * 8 * 4))
check "raw: the stored mean | logvar" cmp c0.f32 <(head -c $((4 * 12 * 16 * 8 * 4)) lat.latents)
check_rc "inspect --clip 3 --json" 0 "$ING" inspect lat --clip 3 --json
expect "clip 3: the tall shape" '"latent_shape":[4,16,12,8]' "$(tr -d '\n ' <<<"$out")"
expect "clip 3: its label" '"label": 5' "$out"
expect "clip 3: its caption, renumbered" '"caption": 1' "$out"
check_rc "clip 3 --raw" 0 "$ING" inspect lat --clip 3 --raw c3.f32
check "raw: clip 3's bytes" cmp c3.f32 <(tail -c $((4 * 16 * 12 * 8 * 4)) lat.latents)
run "--raw refuses an existing file" 1 "$ING" inspect lat --clip 0 --raw c0.f32
expect "it says so" "exists" "$err"
check_rc "--raw --force replaces it" 0 "$ING" inspect lat --clip 3 --raw c0.f32 --force
check "with clip 3's values" cmp c0.f32 c3.f32
mkdir adir
run "--raw never replaces a directory" 1 "$ING" inspect lat --clip 0 --raw adir --force
expect "it names what it is" "directory" "$err"
run "--clip out of range" 1 "$ING" inspect lat --clip 4
expect "it names the range" "out of range (4 clips" "$err"
run "--raw without --clip" 2 "$ING" inspect lat --raw x.f32

# bf16: half the bytes, the same shapes
check_rc "bf16" 0 "$ING" preprocess latents --clips clips --vae "$VAE" --output-prefix l16 \
    --dtype bf16 --batch 2 --quiet
check "bf16: half the data" test $(($(stat -c %s lat.latents) / 2)) -eq "$(stat -c %s l16.latents)"
check_rc "bf16 verifies" 0 "$ING" verify l16
check_rc "bf16 raw is float32" 0 "$ING" inspect l16 --clip 0 --raw b0.f32
check "bf16 raw: the same size" test "$(stat -c %s b0.f32)" -eq "$(stat -c %s c0.f32)" -o \
    "$(stat -c %s b0.f32)" -eq $((4 * 12 * 16 * 8 * 4))

# ---- reruns, --force, a killed run ------------------------------------------------------------
run "a rerun is refused" 1 "$ING" preprocess latents --clips clips --vae "$VAE" --output-prefix lat
expect "naming the output" "exists: an output is already there (use --force)" "$err"
cp lat.latents before.latents
check_rc "--force replaces it" 0 "$ING" preprocess latents --clips clips --vae "$VAE" \
    --output-prefix lat --force --quiet --threads 1
check "with the same bytes (another thread count)" cmp before.latents lat.latents

# what a killed run leaves: the marker and part of the files
cp lat.latents k.latents && head -c 100 lat.lclips >k.lclips && : >k.incomplete
run "verify refuses a killed run's files" 1 "$ING" verify k
expect "naming the run" "unfinished preprocess run" "$err"
run "inspect refuses them" 1 "$ING" inspect k
check_rc "the next run removes them and starts over" 0 "$ING" preprocess latents --clips clips \
    --vae "$VAE" --output-prefix k
expect "it says so" "removing the output of an unfinished earlier run" "$err"
check "no marker left" test ! -e k.incomplete
check_rc "and it verifies" 0 "$ING" verify k
check "the same latents" cmp lat.latents k.latents

# never through what is not a regular file
mkfifo p.latents
run "a pipe in the way" 1 "$ING" preprocess latents --clips clips --vae "$VAE" --output-prefix p --force
expect "is refused" "not a regular file" "$err"
check "and left alone" test -p p.latents

# ---- a VAE as a run, a checkpoint, an export --------------------------------------------------
cat >vae.yaml <<'YAML'
model: {arch: vae, block_out_channels: [8, 16, 16], layers_per_block: 1, latent_channels: 4,
        norm_groups: 4, seed: 1}
data: {path: [clips], seed: 5}
train: {micro_batch: 2, global_batch: 2, steps: 2, run_dir: run}
optim: {lr: 1.0e-3, min_lr: 1.0e-4, warmup: 1, weight_decay: 0}
eval: {every: 0}
ckpt: {every: 2, keep: 1}
log: {every: 1}
YAML
check_rc "train a VAE 2 steps" 0 "$ING" train vae.yaml --threads 2 --quiet
check_rc "export it" 0 "$ING" ckpt export run --output exp
check_rc "latents from the run directory" 0 "$ING" preprocess latents --clips clips --vae run \
    --output-prefix lrun --quiet
check_rc "from its checkpoint" 0 "$ING" preprocess latents --clips clips \
    --vae run/ckpt/step_00000002 --output-prefix lck --quiet
check_rc "from its export (diffusers' files)" 0 "$ING" preprocess latents --clips clips --vae exp \
    --output-prefix lexp --quiet
ident() { grep -o '"weights_xxh3": "[0-9a-f]*"' "$1.json"; }
check "one VAE: the same identity" test "$(ident lrun)" = "$(ident lexp)" -a "$(ident lrun)" = "$(ident lck)"
check "one VAE: the same latents" cmp lrun.latents lexp.latents
check_rc "inspect: 4x down" 0 "$ING" inspect lexp
expect "the trained VAE's shape" "shape      [4, 6, 8, 8]: 2 clips" "$out"
check_rc "the caption shard of a list's clips verifies" 0 "$ING" verify lexp.captions

# ---- refusals ---------------------------------------------------------------------------------
"$ING" preprocess video --manifest ma.csv --output-prefix odd --frames 2 --size 30x30 --quiet ||
    fail "preprocess 30x30"
run "frames the downsampling does not divide" 1 "$ING" preprocess latents --clips odd --vae exp \
    --output-prefix lodd
expect "names the size and the factor" "frames of 30x30: the VAE's 2 downsamplings" "$err"
check "and leaves nothing" test ! -e lodd.json -a ! -e lodd.latents -a ! -e lodd.incomplete
mkdir -p mem/proc/self
printf 'MemTotal:  25165824 kB\nMemAvailable:  100 kB\n' >mem/proc/meminfo
echo "0::/" >mem/proc/self/cgroup
run "memory that does not fit" 1 env IG_FAULT_MEMORY_ROOT="$T/mem" "$ING" preprocess latents \
    --clips clips --vae "$VAE" --output-prefix lmem
expect "refused with the figures" "encoding the clips needs" "$err"
check "nothing written" test ! -e lmem.json -a ! -e lmem.incomplete
run "a model that is not a VAE" 1 "$ING" preprocess latents --clips clips \
    --vae "$SRC/tests/data/golden/t5/gated" --output-prefix lt5
expect "says what it is" "not a VAE" "$err"
check "in one line" test "$(grep -c . <<<"$err")" -eq 1
run "clips that are not there" 1 "$ING" preprocess latents --clips nothere --vae "$VAE" --output-prefix lx
expect "names them" "nothere" "$err"
run "a VAE that is not there" 1 "$ING" preprocess latents --clips clips --vae nothere --output-prefix lx
run "no --vae" 2 "$ING" preprocess latents --clips clips --output-prefix lx
expect "usage error" "--vae" "$err"
run "a bad dtype" 2 "$ING" preprocess latents --clips clips --vae "$VAE" --output-prefix lx --dtype fp16
run "--batch 0" 2 "$ING" preprocess latents --clips clips --vae "$VAE" --output-prefix lx --batch 0
# ---- --text-encoder: the clips' caption features in the same run ---------------------------
T5=$SRC/tests/data/golden/t5/gated # a tiny T5 with its tokenizer
check_rc "latents with --text-encoder" 0 "$ING" preprocess latents --clips clips --vae "$VAE" \
    --output-prefix latf --text-encoder "$T5" --caption-len 32 --threads 2
expect "it says what it made of the captions" "caption features: 4 clips, 2 captions encoded" "$out"
check "the latents are the same as without it" cmp latf.latents lat.latents
check "the features verify" "$ING" verify latf.features --quiet
check_rc "preprocess captions of the same clips" 0 "$ING" preprocess captions --clips clips \
    --text-encoder "$T5" --caption-len 32 --output-prefix featc --quiet
check "the features are preprocess captions' bytes" cmp latf.features.feat featc.feat
rm -f latg.latents latg.lclips latg.json
cp latf.features.json latg.features.json
cp latf.features.feat latg.features.feat
cp latf.features.fidx latg.features.fidx
run "existing features refuse the run before it encodes" 1 "$ING" preprocess latents \
    --clips clips --vae "$VAE" --output-prefix latg --text-encoder "$T5"
expect "naming them" "latg.features exists (caption features): give --force" "$err"
check "nothing encoded" test ! -e latg.latents
check_rc "--force replaces both" 0 "$ING" preprocess latents --clips clips --vae "$VAE" \
    --output-prefix latg --text-encoder "$T5" --caption-len 32 --force --quiet
check "the same features again" cmp latg.features.feat featc.feat
run "--caption-len without --text-encoder" 2 "$ING" preprocess latents --clips clips --vae "$VAE" \
    --output-prefix lx --caption-len 8
expect "says what it goes with" "--caption-len and --features-dtype go with --text-encoder DIR" "$err"
check_rc "help" 0 "$ING" help preprocess latents
expect "help shows the usage" "usage: ingot preprocess latents --clips PREFIX --vae DIR" "$out"
ig_end
