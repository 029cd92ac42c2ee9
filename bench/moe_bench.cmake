# mlaserve-moe-bench: the routed experts' CUDA paths against cuBLAS's dense rate and copy
# bandwidth, on V2-Lite and V3 expert shapes (docs/BENCHMARKS.md, "MoE experts").
if(MLASERVE_WITH_CUDA)
  add_executable(mlaserve-moe-bench ${CMAKE_CURRENT_SOURCE_DIR}/moe_bench/moe_bench.cu)
  target_link_libraries(mlaserve-moe-bench PRIVATE kernels_gemm kernels_moe CUDA::cudart_static)
endif()
