#!/usr/bin/env bash
# The CPU GEMM libraries Debian offers, side by side on the shapes Trident
# runs: OpenBLAS (with whatever core type this machine's environment gives it),
# BLIS and oneDNN (the one Trident uses). Runs alternate, per thread count.
#   usage: perf/gemm_libraries.sh [THREADS...]   (default: 1 and all cores)
# Needs libopenblas-dev libblis-dev libdnnl-dev (apt-get install).
set -euo pipefail
cd "$(dirname "$0")"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
arch=$(gcc -print-multiarch)
ob=/usr/lib/$arch/openblas-openmp
blis=/usr/lib/$arch/blis-openmp
g++ -O2 -fopenmp gemm_libraries.cpp -I/usr/include/$arch/openblas-openmp -L"$ob" \
  -Wl,-rpath,"$ob" -lopenblas -o "$out/gemm_openblas"
g++ -O2 -fopenmp -DUSE_BLIS gemm_libraries.cpp -I/usr/include/$arch/blis-openmp -L"$blis" \
  -Wl,-rpath,"$blis" -lblis -o "$out/gemm_blis"
g++ -O2 -fopenmp -DUSE_DNNL gemm_libraries.cpp -ldnnl -o "$out/gemm_onednn"

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
echo "date: $(date -u +%F)  machine: $(nproc) cores, $cpu"
echo "OpenBLAS core: $(python3 -c "import ctypes; l = ctypes.CDLL('$ob/libopenblas.so.0'); \
l.openblas_get_corename.restype = ctypes.c_char_p; print(l.openblas_get_corename().decode())")" \
  "(OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
for t in ${@:-1 $(nproc)}; do
  for lib in openblas blis onednn; do "$out/gemm_$lib" "$t"; done
done
