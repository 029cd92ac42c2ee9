# common_grpc (owner: workers): gRPC-facing plumbing every server shares: the one
# absl::Status <-> grpc::Status mapping, the ServerRunner (listen, health, reflection,
# signals, drain), and the Prometheus metrics registry with its /metrics endpoint.
pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

add_library(mlaserve_common_grpc STATIC
  ${CMAKE_CURRENT_LIST_DIR}/grpc_callback_anchor.cc
  ${CMAKE_CURRENT_LIST_DIR}/grpc_status.cc
  ${CMAKE_CURRENT_LIST_DIR}/server.cc
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cc
  ${CMAKE_CURRENT_LIST_DIR}/call_auth.cc
  ${CMAKE_CURRENT_LIST_DIR}/cluster_security.cc
  ${CMAKE_CURRENT_LIST_DIR}/transport_security.cc)
target_link_libraries(mlaserve_common_grpc
  PUBLIC mlaserve_common mlaserve_request_limits gRPC::grpc++ gRPC::grpc++_reflection
         absl::synchronization absl::time
  PRIVATE PkgConfig::CPP_HTTPLIB CLI11::CLI11)
mlaserve_warnings(mlaserve_common_grpc)

mlaserve_test(mlaserve_common_grpc_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/grpc_status_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/server_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/call_auth_test.cc
  DEPS mlaserve_common_grpc PkgConfig::CPP_HTTPLIB)

# worker_common (owner: workers): what the prefill and decode workers share at their RPC edge:
# SamplingParams -> model::SamplingOptions, prompt validation, ModelIdentity, and the
# self-registration + heartbeat client for the router's Admin API.
add_library(mlaserve_worker_common STATIC
  ${CMAKE_CURRENT_LIST_DIR}/worker_options.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_proto.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_registration.cc)
target_link_libraries(mlaserve_worker_common
  PUBLIC mlaserve_common mlaserve_common_grpc mlaserve_proto model_sampler mlaserve_kernels_common
         absl::synchronization absl::time
  PRIVATE CLI11::CLI11)
mlaserve_warnings(mlaserve_worker_common)
mlaserve_test(mlaserve_worker_common_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker_proto_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/worker_registration_test.cc
  DEPS mlaserve_worker_common)
