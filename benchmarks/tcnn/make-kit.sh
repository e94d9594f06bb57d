#!/usr/bin/env bash
# Assembles the offline tiny-cuda-nn source kit that benchmarks/tcnn/run.sh builds on the GPU machine (no network
# there): the four repositories at the commits VERSIONS.txt names, trimmed to what the C++ library needs, with
# tcnn-kit.patch applied (a link fix for builds without NVRTC, and TCNN_KIT_MINIMAL, which compiles only the
# template instances the benchmark uses: 2D and 3D hash grids with 2 features per level, FullyFusedMLP width 64).
# cutlass is cut down to the headers tiny-cuda-nn's sources reach through #include (every include followed,
# whatever #if surrounds it), ~4 MiB of its ~14, so that the kit is ~6 MiB and fits a GPU call next to a
# SlangPy bundle. Derived from ../shared/tools/tcnn-bench/make-kit.sh (which keeps cutlass whole, 2D grids only).
#
#   usage: benchmarks/tcnn/make-kit.sh OUT_DIR TCNN_GIT CUTLASS_GIT FMT_GIT CMRC_GIT
#     each *_GIT is a git directory holding that repository (e.g. what the search tool's fetch returns for
#     github:NVlabs/tiny-cuda-nn, github:NVIDIA/cutlass, github:fmtlib/fmt, github:vector-of-bool/cmrc).
#     OUT_DIR must not exist or be empty; keep it out of git (e.g. .tcnn-kit/, listed in .git/info/exclude).
#   then, on the GPU machine:  TCNN_KIT=OUT_DIR bash benchmarks/tcnn/run.sh   (or benchmarks/neural_field.py --tcnn)
set -euo pipefail
[ $# -eq 5 ] || { sed -n 2,15p "$0"; exit 2; }
out=$1; here=$(cd "$(dirname "$0")" && pwd)
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then
	echo "make-kit.sh: $out exists and is not empty; give a new folder (nothing was changed)" >&2; exit 2
fi
TCNN=6ee3546bda615f51abe684ce9edefeb414689135 CUTLASS=82f5075946e2569589439d500733b700a3141374
FMT=fa2eb2d2e3ec5c21629f8ccd88ae05ec40b963fa CMRC=952ffddba731fc110bd50409e8d2b8a06abbd237
for pair in "$2:$TCNN" "$3:$CUTLASS" "$4:$FMT" "$5:$CMRC"; do
	git --git-dir="${pair%:*}" cat-file -e "${pair##*:}^{commit}" 2>/dev/null \
		|| { echo "make-kit.sh: ${pair%:*} has no commit ${pair##*:} (see VERSIONS.txt)" >&2; exit 2; }
done
tcnn="$out/tiny-cuda-nn"; deps="$tcnn/dependencies"
mkdir -p "$tcnn" "$deps/cutlass" "$deps/fmt" "$deps/cmrc"
# (git archive warns about blobs absent from a partial snapshot, e.g. README images; the paths asked for are checked below)
git --git-dir="$2" archive "$TCNN" CMakeLists.txt LICENSE.txt README.md include src dependencies/json dependencies/pcg32 \
	2>/dev/null | tar -x -C "$tcnn"
git --git-dir="$3" archive "$CUTLASS" CMakeLists.txt LICENSE.txt include tools/util/include 2>/dev/null | tar -x -C "$deps/cutlass"
git --git-dir="$4" archive "$FMT" CMakeLists.txt README.rst ChangeLog.rst LICENSE.rst include src support/cmake 2>/dev/null | tar -x -C "$deps/fmt"
git --git-dir="$5" archive "$CMRC" CMakeLists.txt CMakeRC.cmake LICENSE.txt 2>/dev/null | tar -x -C "$deps/cmrc"
for f in "$tcnn/src/fully_fused_mlp.cu" "$tcnn/include/tiny-cuda-nn/encodings/grid.h" "$deps/json/json.hpp" \
	"$deps/cutlass/include/cutlass/cutlass.h" "$deps/fmt/include/fmt/format.h" "$deps/fmt/ChangeLog.rst" "$deps/cmrc/CMakeRC.cmake"; do
	[ -f "$f" ] || { echo "make-kit.sh: $f is missing after the export" >&2; exit 1; }
done
(cd "$tcnn" && patch -s -p1 < "$here/tcnn-kit.patch")

# Keep only the cutlass headers reachable from tiny-cuda-nn's sources and headers.
python3 - "$tcnn" <<'EOF'
import os, re, sys
root = sys.argv[1]
cutlass = os.path.join(root, "dependencies", "cutlass")
search = [os.path.join(root, d) for d in ("include", "dependencies", "dependencies/cutlass/include",
                                          "dependencies/cutlass/tools/util/include", "dependencies/fmt/include")]
include = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
todo = [os.path.join(d, f) for top in ("src", "include") for d, _, fs in os.walk(os.path.join(root, top)) for f in fs]
seen = set()
while todo:
    path = os.path.realpath(todo.pop())
    if path in seen:
        continue
    seen.add(path)
    with open(path, errors="replace") as f:
        names = include.findall(f.read())
    for name in names:
        for d in [os.path.dirname(path)] + search:
            if os.path.isfile(os.path.join(d, name)):
                todo.append(os.path.join(d, name))
                break
kept = removed = 0
for sub in ("include", "tools"):
    for d, _, fs in os.walk(os.path.join(cutlass, sub)):
        for f in fs:
            p = os.path.realpath(os.path.join(d, f))
            if p in seen:
                kept += 1
            else:
                os.remove(p)
                removed += 1
for d, _, _ in sorted(os.walk(cutlass), reverse=True):   # empty folders, deepest first
    if not os.listdir(d):
        os.rmdir(d)
print(f"make-kit.sh: cutlass headers kept {kept}, removed {removed}")
EOF
cp "$here/VERSIONS.txt" "$out/"
du -sh --apparent-size "$out"
