# model_loader: config.json parsing, memory-mapped safetensors (single file or sharded), and the
# WeightStore that converts bf16/f16/f32/fp8-block-scaled weights for the runtime.
add_library(model_loader STATIC
  ${CMAKE_CURRENT_LIST_DIR}/config.cc
  ${CMAKE_CURRENT_LIST_DIR}/config_moe.cc
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cc
  ${CMAKE_CURRENT_LIST_DIR}/weights.cc)
target_link_libraries(model_loader PUBLIC mlaserve_common mlaserve_kernels_common
                      nlohmann_json::nlohmann_json absl::status absl::statusor absl::strings)
mlaserve_warnings(model_loader)

mlaserve_test(model_config_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/config_test.cc DEPS model_loader)
mlaserve_test(model_safetensors_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/safetensors_test.cc ${CMAKE_CURRENT_LIST_DIR}/weights_test.cc
  DEPS model_loader)
