# End-to-end engine benchmark (bench/engine_bench): mlaserve-engine-bench, CUDA builds only.
get_property(_engine_bench_added GLOBAL PROPERTY MLASERVE_ENGINE_BENCH_ADDED)
if(NOT _engine_bench_added)
  add_subdirectory(${CMAKE_CURRENT_LIST_DIR}/engine_bench ${CMAKE_CURRENT_BINARY_DIR}/engine_bench)
endif()
