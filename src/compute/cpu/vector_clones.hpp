// Hot loops are compiled three times, for AVX-512 (x86-64-v4), AVX2+FMA
// (x86-64-v3) and the baseline, and the loader picks the widest the CPU runs
// (GCC function multiversioning; OpenMP bodies are cloned with them). So the
// portable release build vectorises as a -march=native one does.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define TRIDENT_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TRIDENT_VECTOR_CLONES
#endif
