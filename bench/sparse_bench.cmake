# Sparse-attention kernel benchmarks (bench/sparse_bench): mlaserve-sparse-bench, CUDA builds
# only. Guarded so that an explicit add_subdirectory(sparse_bench) elsewhere does not add it twice.
get_property(_sparse_bench_added GLOBAL PROPERTY MLASERVE_SPARSE_BENCH_ADDED)
if(NOT _sparse_bench_added)
  add_subdirectory(${CMAKE_CURRENT_LIST_DIR}/sparse_bench ${CMAKE_CURRENT_BINARY_DIR}/sparse_bench)
endif()
