# mlaserve-dense-bench (owner: gemv): CUDA timings of the dense kernel families (gemm,
# moe routing and experts, norm, activation, rope, sampling) with their roofline fractions, and
# the decode section (small-M GEMM vs cuBLASLt at 1-16 tokens, % of copy bandwidth).
if(MLASERVE_WITH_CUDA)
  add_executable(mlaserve-dense-bench ${CMAKE_CURRENT_SOURCE_DIR}/dense_kernels/dense_bench.cu
                 ${CMAKE_CURRENT_SOURCE_DIR}/dense_kernels/small_m_bench.cu)
  target_include_directories(mlaserve-dense-bench PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(mlaserve-dense-bench PRIVATE kernels_gemm kernels_moe kernels_norm
                        kernels_activation kernels_rope kernels_sampling CUDA::cublas
                        nlohmann_json::nlohmann_json CUDA::cudart_static)
endif()

# mlaserve-stream-probe: one wave of CTAs streaming a weight-sized buffer, by load mechanism,
# ring depth and CTAs per SM (issue 12: why the decode step's weight streams stay under the copy
# rate). Standalone: CUDA runtime only.
if(MLASERVE_WITH_CUDA)
  add_executable(mlaserve-stream-probe ${CMAKE_CURRENT_SOURCE_DIR}/dense_kernels/stream_probe.cu)
  target_link_libraries(mlaserve-stream-probe PRIVATE CUDA::cudart_static)
endif()

# mlaserve-gemm-algo-sweep: cuBLASLt's first heuristic answer (the engine's GEMM algorithm per
# shape) against its next candidates on the prefill-sized projections of V2-Lite and V3, timed
# alternately with the first answer (issue 12: the dense path's algorithm per shape).
# CUDA runtime and cuBLASLt; bench_util.cuh's checks, buffers and fill (header only).
if(MLASERVE_WITH_CUDA)
  add_executable(mlaserve-gemm-algo-sweep ${CMAKE_CURRENT_SOURCE_DIR}/dense_kernels/gemm_algo_sweep.cu)
  target_include_directories(mlaserve-gemm-algo-sweep PRIVATE ${PROJECT_SOURCE_DIR})  # bench_util.cuh
  target_link_libraries(mlaserve-gemm-algo-sweep PRIVATE CUDA::cublasLt nlohmann_json::nlohmann_json
                        CUDA::cudart_static)
endif()
