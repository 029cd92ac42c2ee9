# Kernel benchmarks (bench/kernel_bench): mlaserve-kernel-bench, CUDA builds only. Guarded so
# that an explicit add_subdirectory(kernel_bench) elsewhere does not add it twice.
get_property(_kernel_bench_added GLOBAL PROPERTY MLASERVE_KERNEL_BENCH_ADDED)
if(NOT _kernel_bench_added)
  add_subdirectory(${CMAKE_CURRENT_LIST_DIR}/kernel_bench ${CMAKE_CURRENT_BINARY_DIR}/kernel_bench)
endif()
