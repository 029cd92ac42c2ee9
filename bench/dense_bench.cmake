# mlaserve-dense-bench (owner: cuda-dense): CUDA timings of the dense kernel families (gemm,
# moe routing and experts, norm, activation, rope, sampling) with their roofline fractions.
if(MLASERVE_WITH_CUDA)
  add_executable(mlaserve-dense-bench ${CMAKE_CURRENT_SOURCE_DIR}/dense_kernels/dense_bench.cu)
  target_link_libraries(mlaserve-dense-bench PRIVATE kernels_gemm kernels_moe kernels_norm
                        kernels_activation kernels_rope kernels_sampling CUDA::cudart_static)
endif()
