# common_grpc (owner: workers): gRPC-facing plumbing every server shares: the one
# absl::Status <-> grpc::Status mapping, the ServerRunner (listen, health, reflection,
# signals, drain), the Prometheus metrics registry with its /metrics endpoint, and the bounded
# cpp-httplib servers (bounded_http_server.h) behind it and the router's HTTP API.
pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

add_library(mlaserve_common_grpc STATIC
  ${CMAKE_CURRENT_LIST_DIR}/grpc_callback_anchor.cc
  ${CMAKE_CURRENT_LIST_DIR}/grpc_status.cc
  ${CMAKE_CURRENT_LIST_DIR}/server.cc
  ${CMAKE_CURRENT_LIST_DIR}/bounded_http_server.cc
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cc
  ${CMAKE_CURRENT_LIST_DIR}/metrics_tls.cc
  ${CMAKE_CURRENT_LIST_DIR}/call_auth.cc
  ${CMAKE_CURRENT_LIST_DIR}/cluster_security.cc
  ${CMAKE_CURRENT_LIST_DIR}/transport_security.cc)
target_link_libraries(mlaserve_common_grpc
  PUBLIC mlaserve_common mlaserve_request_limits mlaserve_host_port gRPC::grpc++ gRPC::grpc++_reflection
         absl::synchronization absl::time
  PRIVATE PkgConfig::CPP_HTTPLIB CLI11::CLI11)
mlaserve_warnings(mlaserve_common_grpc)

# A throwaway CA and certificates for TLS tests, made in process (common/testing/test_pki.h).
find_package(OpenSSL REQUIRED)
add_library(mlaserve_test_pki STATIC ${CMAKE_CURRENT_LIST_DIR}/testing/test_pki.cc)
target_link_libraries(mlaserve_test_pki PUBLIC mlaserve_common absl::status absl::statusor
                      PRIVATE OpenSSL::Crypto)
mlaserve_warnings(mlaserve_test_pki)

mlaserve_test(mlaserve_common_grpc_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/grpc_status_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/metrics_tls_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/server_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/server_idle_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/call_auth_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/bounded_http_server_test.cc
  DEPS mlaserve_common_grpc mlaserve_test_pki PkgConfig::CPP_HTTPLIB)
