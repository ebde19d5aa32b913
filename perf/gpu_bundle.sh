#!/usr/bin/env bash
# Packs a CUDA build for a GPU node that lacks this machine's packages: the
# trident binary and the GPU test executables, every shared library they load
# except glibc and the C++ runtime, the CUDA driver and toolkit (cudart, cuBLAS, NCCL come from
# the node), and a relocated Open MPI (mpirun, orted, components, PMIx).
#   usage: perf/gpu_bundle.sh BUILD_DIR OUT.tar.xz
# On the node: tar -xJf OUT.tar.xz -C DIR && source DIR/trident-bundle/env.sh
# (puts trident, mpirun and the tests on PATH), then perf/gpu_check.sh.
set -euo pipefail
build=$(realpath "$1")
out=$(realpath -m "$2")
stage=$(mktemp -d)
root=$stage/trident-bundle
mkdir -p "$root/bin" "$root/lib"

ompi_lib=$(ompi_info --path libdir | awk '{print $2}')
ompi_components=$(ompi_info --path pkglibdir | awk '{print $2}')
pmix_dir=$(dirname "$(dirname "$(ldconfig -p | awk '/libpmix.so.2 /{print $NF; exit}' | xargs readlink -f)")")
mpirun_bin=$(readlink -f "$(command -v mpirun)")
orted_bin=$(command -v orted)

# Libraries the node brings (glibc, driver, CUDA toolkit): never copied.
skip='linux-vdso|ld-linux|libstdc\+\+|libgcc_s|/libc\.so|/libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libcuda\.|libcudart|libcublas|libnccl|libnvidia'
copy_deps() {
  ldd "$@" 2>/dev/null | awk '/=> \//{print $3}' | grep -Ev "$skip" | sort -u |
    while read -r lib; do cp -nL "$lib" "$root/lib/"; done
}

cp "$build/src/trident" "$root/bin/"
for t in "$build"/tests/gpu_*; do [ -x "$t" ] && [ -f "$t" ] && cp "$t" "$root/bin/"; done
copy_deps "$root"/bin/*

# Open MPI in the layout its relative paths expect under OPAL_PREFIX=$root/ompi.
prefix=$root/ompi
rel_lib=${ompi_lib#/usr/}
mkdir -p "$prefix/bin" "$prefix/$rel_lib" "$prefix/share"
cp "$mpirun_bin" "$prefix/bin/orterun"
ln -s orterun "$prefix/bin/mpirun"
cp "$orted_bin" "$prefix/bin/orted"
rel_components=${ompi_components#/usr/}
mkdir -p "$prefix/$rel_components"
# Components for shared memory and TCP; the fabric ones (UCX, OFI, verbs, PSM)
# need libraries a single-node check does not.
for c in "$ompi_components"/*.so; do
  case $(basename "$c") in *ucx*|*ofi*|*openib*|*psm*|*verbs*|*uct*) continue ;; esac
  cp "$c" "$prefix/$rel_components/"
done
cp -a /usr/share/openmpi "$prefix/share/"
rel_pmix=${pmix_dir#/usr/}
mkdir -p "$prefix/$(dirname "$rel_pmix")"
cp -a "$pmix_dir" "$prefix/$rel_pmix"
copy_deps "$prefix/bin/orterun" "$prefix/bin/orted" "$prefix/$rel_components"/*.so \
  "$prefix/$rel_pmix"/lib/pmix/*.so

cat >"$root/env.sh" <<EOF
# Sourced on the GPU node: the bundle first on the search paths, then the
# node's CUDA runtime, cuBLAS and NCCL (toolkit or Python wheels).
here=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
cuda_dirs=""
for lib in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
  hit=\$(find /usr/local/cuda*/lib* /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu \\
           /opt /usr/local/lib -name "\$lib" 2>/dev/null | head -1)
  [ -n "\$hit" ] && cuda_dirs="\$cuda_dirs:\$(dirname "\$hit")" || echo "env.sh: \$lib not found" >&2
done
export PATH="\$here/bin:\$here/ompi/bin:\$PATH"
export LD_LIBRARY_PATH="\$here/lib:\$here/ompi/$rel_lib:\$here/ompi/$rel_pmix/lib\$cuda_dirs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export OPAL_PREFIX="\$here/ompi" PMIX_INSTALL_PREFIX="\$here/ompi/$rel_pmix"
export PMIX_MCA_mca_base_component_path="\$here/ompi/$rel_pmix/lib/pmix"
# A node with its own PMIx at the packaged path (Ubuntu's) makes the bundle's
# PMIx try that one's components: each process prints "unable to open
# ...pmix_mca_pcompress_zlib" and runs on without compression (harmless).
export PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi,psm,psm2 OMPI_MCA_osc=^ucx,pt2pt
export OMPI_MCA_btl_base_warn_component_unused=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EOF
tar -C "$stage" -cJf "$out" trident-bundle
echo "$out: $(du -h "$out" | cut -f1) ($(ls "$root/lib" | wc -l) libraries, $(du -sh "$root" | cut -f1) unpacked)"
rm -rf "$stage"
