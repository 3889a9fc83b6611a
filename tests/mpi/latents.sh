#!/usr/bin/env bash
# latents.sh (MPI) - `preprocess latents` under mpirun -np 2: the ranks split the clips into one
# output (each writes its latent shard, rank 0 the list), which verifies and holds every clip with
# exactly the values one process stores (each clip's raw mean | logvar compared); a rerun is
# refused and --force replaces it; a directory where rank 1's shard would go is refused on every
# rank before anything is written.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_latents
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
command -v ffmpeg >/dev/null || { echo "skipped: the ffmpeg CLI is not installed"; exit 77; }
SRC=${IG_SOURCE_DIR:?}
cd "$T" || die "cd"
FF=(ffmpeg -nostdin -hide_banner -loglevel error -y)
for i in 1 2 3; do
  "${FF[@]}" -f lavfi -i "testsrc2=size=64x48:rate=25:duration=0.$((i + 4))" -c:v libx264 "v$i.mp4" || die ffmpeg
done
printf 'path,text\nv1.mp4,one\nv2.mp4,two\nv3.mp4,three\n' >m.csv
"$ING" preprocess video --manifest m.csv --output-prefix clips --frames 4 --size 24x32 \
    --clips-per-video 2 --tokenizer "$SRC/data/gpt2" --quiet >pre.log 2>&1 || die "preprocess video"
VAE=$SRC/tests/data/golden/vae/a

check_rc "one process" 0 "$ING" preprocess latents --clips clips --vae "$VAE" --output-prefix one \
    --quiet --threads 1
mpi 2 "$ING" preprocess latents --clips clips --vae "$VAE" --output-prefix two --threads 1 >log 2>&1
rc=$?
check "mpirun preprocess latents exit 0" test $rc -eq 0
[ $rc -eq 0 ] || cat log
check "rank 0 wrote the list" test -f two.shards.json
check "both ranks wrote a shard" test -f two_r0000.lclips -a -f two_r0001.lclips
check "no marker is left" test ! -e two.incomplete
check_rc "the list verifies" 0 "$ING" verify two
expect "every clip is in it" "6 clips" "$out"
for k in 0 1 2 3 4 5; do
  "$ING" inspect one --clip $k --raw one_$k.f32 >/dev/null 2>&1 || fail "raw of clip $k (one)"
  "$ING" inspect two --clip $k --raw two_$k.f32 >/dev/null 2>&1 || fail "raw of clip $k (two)"
  check "clip $k: two ranks store what one process does" cmp one_$k.f32 two_$k.f32
done
check_rc "inspect the list" 0 "$ING" inspect two --clip 5 --json
expect "a clip of rank 1 keeps its caption" '"caption": ' "$out"
check "the captions of rank 1 verify" "$ING" verify two_r0001.captions --quiet

# a rerun over it is refused on every rank, --force replaces it
mpi 2 "$ING" preprocess latents --clips clips --vae "$VAE" --output-prefix two --quiet >log 2>&1
check "a rerun is refused" test $? -ne 0
grep -q "exists: an output is already there" log || fail "the rerun says why: $(head -c 300 log)"
mpi 2 "$ING" preprocess latents --clips clips --vae "$VAE" --output-prefix two --force --quiet >log 2>&1
check "--force replaces it" test $? -eq 0
check_rc "and it verifies" 0 "$ING" verify two

# a directory in the way of rank 1's shard: every rank fails and nothing is left
mkdir bad_r0001.latents
mpi 2 "$ING" preprocess latents --clips clips --vae "$VAE" --output-prefix bad --force --quiet >log 2>&1
check "one rank's failure fails the run" test $? -ne 0
check "and leaves nothing that verifies" test -z "$(ls | grep '^bad.*\.json$')"
check "nor a marker" test ! -e bad.incomplete
ig_end
