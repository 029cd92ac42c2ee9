# Device memory for the model runtime (owner: cuda-dense): DeviceBuffer, PinnedBuffer,
# ScratchArena and stream-ordered copies, in the engine's backend.
add_library(model_device_memory STATIC ${CMAKE_CURRENT_LIST_DIR}/device_memory.cc)
target_include_directories(model_device_memory PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(model_device_memory PUBLIC mlaserve_kernels_common absl::status
                      absl::statusor absl::strings)
if(MLASERVE_WITH_CUDA)
  target_compile_definitions(model_device_memory PRIVATE MLASERVE_MODEL_HAS_CUDA=1)
  target_link_libraries(model_device_memory PUBLIC CUDA::cudart_static)
endif()
mlaserve_warnings(model_device_memory)
mlaserve_test(model_device_memory_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/device_memory_test.cc
              DEPS model_device_memory)

# The engine on the CUDA backend against the HF fixtures (needs a GPU: label gpu).
if(MLASERVE_WITH_CUDA AND MLASERVE_BUILD_TESTS)
  mlaserve_test(model_engine_cuda_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_cuda_test.cc
                DEPS model_engine_probe nlohmann_json::nlohmann_json CUDA::cudart LABELS gpu TIMEOUT 600)
endif()
