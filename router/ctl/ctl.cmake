# mlaservectl: the admin CLI.
add_library(router_ctl STATIC
  ${CMAKE_CURRENT_LIST_DIR}/ctl_format.cc
  ${CMAKE_CURRENT_LIST_DIR}/ctl_commands.cc
  ${CMAKE_CURRENT_LIST_DIR}/ctl_generate.cc)
target_include_directories(router_ctl PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(router_ctl PUBLIC mlaserve_proto mlaserve_common_grpc absl::strings
                      absl::str_format absl::time absl::status absl::synchronization
                      nlohmann_json::nlohmann_json)
mlaserve_warnings(router_ctl)

add_executable(mlaservectl ${CMAKE_CURRENT_LIST_DIR}/ctl_main.cc)
target_link_libraries(mlaservectl PRIVATE router_ctl model_constraint CLI11::CLI11)
mlaserve_warnings(mlaservectl)
install(TARGETS mlaservectl RUNTIME DESTINATION bin)

mlaserve_test(router_ctl_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ctl_format_test.cc DEPS router_ctl)
