# mlaserve-moe-bench: the routed experts' CUDA paths against cuBLAS's dense rate and copy
# bandwidth, on V2-Lite and V3 expert shapes, and the shared experts' fused gate_up
# (docs/BENCHMARKS.md, "MoE experts") and at mid row counts (--shape shared-mid).
if(MLASERVE_WITH_CUDA)
  add_executable(mlaserve-moe-bench ${CMAKE_CURRENT_SOURCE_DIR}/moe_bench/moe_bench.cu
                 ${CMAKE_CURRENT_SOURCE_DIR}/moe_bench/shared_bench.cu
                 ${CMAKE_CURRENT_SOURCE_DIR}/moe_bench/shared_mid_bench.cu)
  target_include_directories(mlaserve-moe-bench PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(mlaserve-moe-bench PRIVATE kernels_gemm kernels_moe kernels_activation CUDA::cublas
                        nlohmann_json::nlohmann_json CUDA::cudart_static)
endif()
