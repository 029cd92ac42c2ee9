# router services (gRPC): Generate, Abort, model/server info, the admin API, the worker poller,
# and the binaries mlaserve-router and mlaservectl.
if(NOT TARGET mlaserve_proto OR NOT TARGET mlaserve_common_grpc)
  message(STATUS "router: mlaserve_proto or mlaserve_common_grpc missing; services not built")
  return()
endif()

add_library(router_service STATIC
  ${CMAKE_CURRENT_LIST_DIR}/api_conversion.cc
  ${CMAKE_CURRENT_LIST_DIR}/admin_conversion.cc
  ${CMAKE_CURRENT_LIST_DIR}/output_assembler.cc
  ${CMAKE_CURRENT_LIST_DIR}/request_table.cc
  ${CMAKE_CURRENT_LIST_DIR}/router_context.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_channels.cc
  ${CMAKE_CURRENT_LIST_DIR}/client_outbox.cc
  ${CMAKE_CURRENT_LIST_DIR}/decode_placement.cc
  ${CMAKE_CURRENT_LIST_DIR}/generate_call.cc
  ${CMAKE_CURRENT_LIST_DIR}/generate_call_end.cc
  ${CMAKE_CURRENT_LIST_DIR}/generation_service.cc
  ${CMAKE_CURRENT_LIST_DIR}/admin_service.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_poller.cc
  ${CMAKE_CURRENT_LIST_DIR}/router_security.cc)
target_link_libraries(router_service PUBLIC router_core mlaserve_proto mlaserve_common_grpc
                      model_loader absl::random_random absl::synchronization
                      PRIVATE CLI11::CLI11)
mlaserve_warnings(router_service)

add_library(router_tokenizer STATIC ${CMAKE_CURRENT_LIST_DIR}/tokenizer_codec.cc)
target_link_libraries(router_tokenizer PUBLIC router_core model_tokenizer)
mlaserve_warnings(router_tokenizer)

add_executable(mlaserve-router ${CMAKE_CURRENT_LIST_DIR}/router_main.cc)
target_link_libraries(mlaserve-router PRIVATE router_service router_tokenizer CLI11::CLI11)
mlaserve_warnings(mlaserve-router)
install(TARGETS mlaserve-router RUNTIME DESTINATION bin)

# Test helpers: a byte-level fake TextCodec and fake prefill / decode worker services.
add_library(router_testing STATIC
  ${CMAKE_CURRENT_LIST_DIR}/testing/byte_codec.cc
  ${CMAKE_CURRENT_LIST_DIR}/testing/fake_workers.cc)
target_link_libraries(router_testing PUBLIC router_service)

mlaserve_test(router_service_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/api_conversion_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/admin_conversion_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/client_outbox_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/decode_placement_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/decode_placement_upgrade_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/output_assembler_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/generate_call_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/generate_call_fault_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/generate_call_admission_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/admin_service_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/router_context_test.cc
  DEPS router_testing)
mlaserve_test(router_tokenizer_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/tokenizer_codec_test.cc
              DEPS router_tokenizer)

if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/ctl/ctl.cmake)
  include(${CMAKE_CURRENT_LIST_DIR}/ctl/ctl.cmake)
endif()
