#!/usr/bin/env bash
# Build tiny-cuda-nn (sm_90 only, static lib + one benchmark binary) and time training steps.
# Derived from ../shared/tools/tcnn-bench/run.sh: the benchmark project (bench.cu, CMakeLists.txt) is this
# folder, the tiny-cuda-nn sources are the kit that make-kit.sh assembles (TCNN_KIT); no prebuilt binaries.
#
#   TCNN_KIT=<kit> bash benchmarks/tcnn/run.sh [bench args]   e.g.  ... --dims 2,3 --steps 1000 --warmup 100
#
# Environment:
#   TCNN_KIT=<dir>         the kit (holds tiny-cuda-nn/); required.
# Optional knobs:
#   TCNN_RTC=auto|ON|OFF   JIT-fusion support (needs nvrtc.h + libnvrtc). auto = ON if found. Default auto.
#   BUILD_DIR=<dir>        build folder (default: <kit>/build). Re-running reuses it (incremental).
#   JOBS=<n>               parallel compile jobs (default: nproc).
#   SKIP_BUILD=1           only run an existing build.
#   KIT_MINIMAL=0          compile all tcnn template instances (upstream behaviour; ~2-3x longer build).
#   RESULTS_DIR=<dir>      also copy run.log and results.json there at the end (e.g. RESULTS_DIR=$OUT).
# Everything printed is also written to <BUILD_DIR>/run.log; results to <BUILD_DIR>/results.json.
set -uo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ -n "${TCNN_KIT:-}" ] || { echo "[run.sh] ERROR: set TCNN_KIT to the kit folder that benchmarks/tcnn/make-kit.sh assembled"; exit 2; }
[ -f "$TCNN_KIT/tiny-cuda-nn/CMakeLists.txt" ] || { echo "[run.sh] ERROR: TCNN_KIT=$TCNN_KIT holds no tiny-cuda-nn/CMakeLists.txt (assemble it with make-kit.sh)"; exit 2; }
KIT="$(cd "$TCNN_KIT" && pwd)"
BUILD_DIR="${BUILD_DIR:-$KIT/build}"
JOBS="${JOBS:-$(nproc)}"
RTC_MODE="${TCNN_RTC:-auto}"
mkdir -p "$BUILD_DIR"
# a build folder configured from another checkout's source folder cannot be reused by cmake: start it afresh
if [ -f "$BUILD_DIR/CMakeCache.txt" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$SRC" "$BUILD_DIR/CMakeCache.txt"; then
	echo "[run.sh] $BUILD_DIR was configured for another source folder; removing its CMake cache"
	rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
fi
LOG="$BUILD_DIR/run.log"
exec > >(tee "$LOG") 2>&1

say() { echo "[run.sh] $*"; }
die() { echo "[run.sh] ERROR: $*"; exit 1; }

# tcnn reads this env var before its CMake option; pin it so nothing else overrides sm_90.
export TCNN_CUDA_ARCHITECTURES=90

NVCC="$(command -v nvcc || true)"
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
[ -n "$NVCC" ] || die "nvcc not found"
command -v cmake >/dev/null || die "cmake not found"
if command -v ninja >/dev/null; then GEN=Ninja; else GEN="Unix Makefiles"; say "ninja not found, using make"; fi

# CUDA root as nvcc itself sees it (works through wrapper scripts).
CUDA_ROOT="$("$NVCC" -dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)"
CUDA_ROOT="$(cd "${CUDA_ROOT:-$(dirname "$NVCC")/..}" && pwd)"
say "nvcc: $NVCC ($("$NVCC" --version | grep -o 'release [0-9.]*'))  CUDA root: $CUDA_ROOT"
say "cmake: $(cmake --version | head -1)  generator: $GEN  jobs: $JOBS  g++: $(g++ -dumpfullversion 2>/dev/null || echo '?')"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | sed 's/^/[run.sh] gpu: /'

# ---------------------------------------------------------------------------
# Shim folder: libcuda.so / libnvrtc.so link names and nvrtc.h, wherever they live
# (toolkit stubs, driver dir, or the pip wheels nvidia/cu13/... of the PyTorch venv).
# ---------------------------------------------------------------------------
SHIM="$BUILD_DIR/shim"
mkdir -p "$SHIM/lib" "$SHIM/include"
PY="$(command -v python3 || command -v python || true)"
PY_NVIDIA_DIRS=""
if [ -n "$PY" ]; then
	PY_NVIDIA_DIRS="$("$PY" - <<'EOF' 2>/dev/null
import importlib.util, os, site, sys
roots = set()
try:
    import nvidia
    roots.update(list(nvidia.__path__))
except Exception:
    pass
for p in (site.getsitepackages() if hasattr(site, "getsitepackages") else []) + [site.getusersitepackages()] + sys.path:
    d = os.path.join(p, "nvidia")
    if os.path.isdir(d):
        roots.add(d)
for r in sorted(roots):
    for sub in ("cu13", "cuda_nvrtc", "cuda_runtime", "cu12"):
        if os.path.isdir(os.path.join(r, sub)):
            print(os.path.join(r, sub))
EOF
)"
fi
LIB_CANDIDATES=("$CUDA_ROOT/targets/x86_64-linux/lib" "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib" \
	"$CUDA_ROOT/targets/x86_64-linux/lib/stubs" "$CUDA_ROOT/lib64/stubs" \
	/usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /lib/x86_64-linux-gnu /usr/lib/wsl/lib)
IFS=':' read -r -a LDP <<< "${LD_LIBRARY_PATH:-}"
for d in "${LDP[@]}"; do [ -n "$d" ] && LIB_CANDIDATES+=("$d"); done
for d in $PY_NVIDIA_DIRS; do LIB_CANDIDATES+=("$d/lib"); done

CUDA_MAJOR="$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -1)"

find_lib() { # $1 = link name (libcuda.so), $2 = preferred soname version (optional); prints a path
	local stem="$1" ver="${2:-}" d f
	# unversioned link name, but only where the wanted soname version sits beside it
	for d in "${LIB_CANDIDATES[@]}"; do
		[ -e "$d/$stem" ] && { [ -z "$ver" ] || [ -e "$d/$stem.$ver" ]; } && { echo "$d/$stem"; return 0; }
	done
	if [ -n "$ver" ]; then
		for d in "${LIB_CANDIDATES[@]}"; do [ -e "$d/$stem.$ver" ] && { echo "$d/$stem.$ver"; return 0; }; done
	fi
	f="$(ldconfig -p 2>/dev/null | awk -v s="$stem" -v v="$ver" 'index($1, s) == 1 && (v == "" || index($1, s "." v) == 1) {print $NF}' | head -1)"
	[ -n "$f" ] && { echo "$f"; return 0; }
	for d in "${LIB_CANDIDATES[@]}"; do
		f="$(ls "$d/$stem".* 2>/dev/null | grep -v '\.alt\.' | sort | head -1)"
		[ -n "$f" ] && { echo "$f"; return 0; }
	done
	return 1
}

RUNTIME_LIBDIRS=""
LIBCUDA="$(find_lib libcuda.so 1 || true)"
if [ -n "$LIBCUDA" ]; then
	ln -sf "$(readlink -f "$LIBCUDA")" "$SHIM/lib/libcuda.so"
	say "libcuda (link): $LIBCUDA"
else
	say "WARNING: no libcuda.so found; linking will rely on the compiler's default paths"
fi

NVRTC_H=""; LIBNVRTC=""
if [ "$RTC_MODE" != "OFF" ]; then
	for d in "$CUDA_ROOT/targets/x86_64-linux/include" "$CUDA_ROOT/include" $(for p in $PY_NVIDIA_DIRS; do echo "$p/include"; done); do
		[ -f "$d/nvrtc.h" ] && { NVRTC_H="$d/nvrtc.h"; break; }
	done
	LIBNVRTC="$(find_lib libnvrtc.so "$CUDA_MAJOR" || true)"
	case "$LIBNVRTC" in *stubs*) LIBNVRTC="";; esac
fi
if [ "$RTC_MODE" != "OFF" ] && [ -n "$NVRTC_H" ] && [ -n "$LIBNVRTC" ]; then
	RTC=ON
	cp -p "$NVRTC_H" "$SHIM/include/nvrtc.h"   # -p keeps mtime: no needless rebuilds
	REAL_NVRTC="$(readlink -f "$LIBNVRTC")"
	ln -sf "$REAL_NVRTC" "$SHIM/lib/libnvrtc.so"
	RUNTIME_LIBDIRS="$(dirname "$REAL_NVRTC")"
	say "nvrtc: header $NVRTC_H, library $LIBNVRTC -> JIT fusion (TCNN_BUILD_WITH_RTC) ON"
else
	[ "$RTC_MODE" = "ON" ] && die "TCNN_RTC=ON but nvrtc.h ('$NVRTC_H') or libnvrtc ('$LIBNVRTC') not found"
	RTC=OFF
	say "nvrtc not used (mode=$RTC_MODE, header='${NVRTC_H}', lib='${LIBNVRTC}') -> TCNN_BUILD_WITH_RTC OFF (no JIT-fusion runs)"
fi

RPATH_FLAGS=""
[ -n "$RUNTIME_LIBDIRS" ] && RPATH_FLAGS="-Wl,-rpath,$RUNTIME_LIBDIRS"
RUN_LD_LIBRARY_PATH="${RUNTIME_LIBDIRS:+$RUNTIME_LIBDIRS:}${LD_LIBRARY_PATH:-}"

configure_and_build() { # $1 = RTC ON|OFF
	local rtc="$1"
	say "configure (TCNN_BUILD_WITH_RTC=$rtc) in $BUILD_DIR"
	cmake -S "$SRC" -B "$BUILD_DIR" -G "$GEN" \
		-DTCNN_KIT_DIR="$KIT" \
		-DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_CUDA_COMPILER="$NVCC" \
		-DCMAKE_CUDA_ARCHITECTURES=90 \
		-DTCNN_CUDA_ARCHITECTURES=90 \
		-DTCNN_BUILD_WITH_RTC="$rtc" \
		-DTCNN_BUILD_BENCHMARK=OFF -DTCNN_BUILD_EXAMPLES=OFF -DTCNN_BUILD_TESTS=OFF \
		-DTCNN_ALLOW_CUBLAS_CUSOLVER=OFF \
		-DTCNN_KIT_MINIMAL="$([ "${KIT_MINIMAL:-1}" = "0" ] && echo OFF || echo ON)" \
		-DCMAKE_CUDA_FLAGS="-I$SHIM/include" \
		-DCMAKE_EXE_LINKER_FLAGS="-L$SHIM/lib $RPATH_FLAGS" \
		|| return 1
	say "build: cmake --build $BUILD_DIR --target tcnn_bench -j $JOBS"
	local t0=$SECONDS
	cmake --build "$BUILD_DIR" --target tcnn_bench -j "$JOBS" || return 1
	say "build finished in $((SECONDS - t0)) s"
}

BIN="$BUILD_DIR/tcnn_bench"
if [ "${SKIP_BUILD:-0}" != "1" ]; then
	if ! configure_and_build "$RTC"; then
		if [ "$RTC" = "ON" ] && [ "$RTC_MODE" = "auto" ]; then
			say "build with RTC failed; retrying without JIT-fusion support (TCNN_BUILD_WITH_RTC=OFF)"
			RTC=OFF
			configure_and_build OFF || die "build failed (see $LOG)"
		else
			die "build failed (see $LOG)"
		fi
	fi
fi

[ -x "$BIN" ] || die "$BIN missing"
say "run: $BIN $* --json $BUILD_DIR/results.json"
LD_LIBRARY_PATH="$RUN_LD_LIBRARY_PATH" "$BIN" "$@" --json "$BUILD_DIR/results.json"
rc=$?
say "exit code $rc; log: $LOG; json: $BUILD_DIR/results.json"
if [ -n "${RESULTS_DIR:-}" ]; then
	mkdir -p "$RESULTS_DIR"
	sleep 1  # let tee flush run.log
	cp -f "$LOG" "$RESULTS_DIR/" 2>/dev/null; cp -f "$BUILD_DIR/results.json" "$RESULTS_DIR/" 2>/dev/null
fi
exit $rc
