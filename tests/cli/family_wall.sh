#!/usr/bin/env bash
# family_wall.sh - the trainer's rooms and the wall around the model families (DESIGN 5.1,
# docs/adding-a-family.md): every header of train/ compiles alone (it includes what it needs);
# each header the build lists as meant for families (IG_TRAIN_FAMILY_API, linked under
# BUILD/include/ingot_train_family/) compiles alone on the families' include path, and any other
# header of the trainer is not found there; the build's check (cmake/family_wall.cmake) refuses a
# family file that names a header by a path leaving its folder, and passes every file of
# train/models/ and train/objectives/ as they are.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin family_wall
SRC=${IG_SOURCE_DIR:?}
BLD=${IG_BUILD_DIR:?}
WALL=$BLD/include/ingot_train_family
CC=${CC:-cc}
cd "$T" || exit 1
[ -d "$WALL/family" ] || die "$WALL: the build made no include path for the families"

# the public headers of every module (each under BUILD/include/TARGET)
pub=()
for d in "$BLD"/include/ingot_*; do
    [ "$d" = "$WALL" ] || pub+=(-I "$d")
done
compiles() { # compiles HEADER INCLUDE_FLAGS...: a file that includes HEADER alone compiles
    local h=$1
    shift
    printf '#include "%s"\n' "$h" >probe.c
    "$CC" -std=c11 -fsyntax-only -Werror -Wall "$@" "${pub[@]}" probe.c 2>"$T/.cc"
}

# ---- every header of the trainer includes what it needs ----------------------------------------
n=0
while IFS= read -r h; do
    rel=${h#"$SRC"/train/}
    case $rel in
    models/* | objectives/*) inc=(-I "$WALL" -I "$(dirname "$h")") ;;
    *) inc=(-I "$SRC/train") ;;
    esac
    if compiles "$h" "${inc[@]}"; then n=$((n + 1)); else
        fail "train/$rel does not compile alone: $(head -c 400 "$T/.cc")"
    fi
done < <(find "$SRC/train" -name '*.h' | sort)
[ "$n" -gt 20 ] && pass || fail "only $n headers of train/ compiled alone"

# ---- the families' include path: the interface, nothing else -----------------------------------
api=$(cd "$WALL" && find . -name '*.h' | sed 's|^\./||' | sort)
expect "the interface is on the families' path" "family/family.h" "$api"
for h in $api; do
    if compiles "$h" -I "$WALL"; then pass; else
        fail "$h (meant for families) does not compile on their path: $(head -c 400 "$T/.cc")"
    fi
done
for h in run/metrics.h optim/optimizer.h ckpt/checkpoint.h plan/plan.h \
    parallel/schedule.h feed/feed_internal.h formats/safetensors_internal.h; do
    [ -f "$SRC/train/$h" ] || { fail "train/$h: no such header (update this list)"; continue; }
    if compiles "$h" -I "$WALL"; then fail "$h is reachable from a family"; else
        expect "$h is not on the families' path" "No such file" "$(cat "$T/.cc")"
    fi
done

# ---- the build's check of the families' files ---------------------------------------------------
mapfile -t fam < <(find "$SRC/train/models" "$SRC/train/objectives" -name '*.[ch]' | sort)
[ "${#fam[@]}" -gt 5 ] || fail "only ${#fam[@]} files under train/models and train/objectives"
list=$(IFS=';'; echo "${fam[*]}")
check_rc "the families' files as they are" 0 cmake "-DIG_FILES=$list" -P "$SRC/cmake/family_wall.cmake"
for line in '#include "../../run/metrics.h"' '#  include <../optim/optimizer.h>' \
    '#include "/abs/train/plan/plan.h"' '#include "family/../run/trainer.h"'; do
    printf '#include "family/family.h"\n%s\n' "$line" >escape.c
    run "wall: $line" 1 cmake "-DIG_FILES=$T/escape.c" -P "$SRC/cmake/family_wall.cmake" &&
        expect "wall: $line is named" "${line##* }" "$err"
done
ig_end
