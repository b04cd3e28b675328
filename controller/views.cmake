# The controller's views (docs/controller-views.md): the view model and its
# renderers (pure, no HTTP), the HTTP adapter (cpp-httplib), and the client
# `trainlet status` uses.

# cpp-httplib, header-only, from Debian's source package of the same patched
# version as libcpp-httplib-dev (whose binary package ships only a shared
# library): scripts/fetch_httplib.sh puts it in third_party/cpp-httplib/.
set(TRAINLET_HTTPLIB_DIR ${CMAKE_SOURCE_DIR}/third_party/cpp-httplib)
if(NOT EXISTS ${TRAINLET_HTTPLIB_DIR}/httplib.h)
  message(FATAL_ERROR "third_party/cpp-httplib/httplib.h is missing: run scripts/fetch_httplib.sh "
    "(scripts/setup.sh runs it) to fetch it from Debian's cpp-httplib source package")
endif()
file(STRINGS ${TRAINLET_HTTPLIB_DIR}/httplib.h _httplib_count_cap REGEX "CPPHTTPLIB_HEADER_MAX_COUNT")
if(NOT _httplib_count_cap)
  message(FATAL_ERROR "third_party/cpp-httplib/httplib.h lacks third_party/patches/: re-run "
    "scripts/fetch_httplib.sh")
endif()
# Re-configure when the fetched header changes.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${TRAINLET_HTTPLIB_DIR}/VERSION)
add_library(trainlet_httplib INTERFACE)
target_include_directories(trainlet_httplib SYSTEM INTERFACE ${TRAINLET_HTTPLIB_DIR})
# The same bounds in every translation unit that includes httplib.h (one
# definition): small request line and headers, a small fixed thread pool.
target_compile_definitions(trainlet_httplib INTERFACE
  CPPHTTPLIB_REQUEST_URI_MAX_LENGTH=2048
  CPPHTTPLIB_HEADER_MAX_LENGTH=4096
  CPPHTTPLIB_HEADER_MAX_COUNT=64
  CPPHTTPLIB_THREAD_POOL_COUNT=4
  CPPHTTPLIB_KEEPALIVE_MAX_COUNT=100
  CPPHTTPLIB_LISTEN_BACKLOG=64
  # poll(), not select(): a controller with a thousand agents' connections
  # has descriptors above FD_SETSIZE, where select() would overflow.
  CPPHTTPLIB_USE_POLL)
target_link_libraries(trainlet_httplib INTERFACE Threads::Threads)

# The view model and its renderers: pure functions, no HTTP.
add_library(trainlet_controller_views STATIC views.cc step_rate.cc)
target_link_libraries(trainlet_controller_views PUBLIC trainlet_common trainlet_proto
  absl::status absl::statusor absl::strings absl::str_format absl::time absl::synchronization)

trainlet_test(controller_views_test SRCS views_test.cc step_rate_test.cc
  LIBS trainlet_controller_views trainlet_controller_views_testing trainlet_common_testing)
if(TARGET controller_views_test)
  # TRAINLET_UPDATE_GOLDEN=1 rewrites the golden files.
  target_compile_definitions(controller_views_test PRIVATE
    TRAINLET_CONTROLLER_TESTDATA="${CMAKE_CURRENT_SOURCE_DIR}/testdata")
endif()

# The HTTP adapter: the page, /api/jobs, /metrics, /healthz.
# Connections come from rendezvous' TcpListener to the gate (http_gate: TLS
# handshakes and whole requests on one epoll thread), then to the workers.
add_library(trainlet_controller_http STATIC http_server.cc http_gate.cc status_page.cc)
target_link_libraries(trainlet_controller_http PUBLIC trainlet_controller_views
  trainlet_rendezvous_core PRIVATE trainlet_httplib OpenSSL::SSL OpenSSL::Crypto)

trainlet_test(controller_http_test SRCS http_server_test.cc
  LIBS trainlet_controller_http trainlet_controller_views_testing trainlet_httplib
  trainlet_rendezvous_tls_testing OpenSSL::SSL OpenSSL::Crypto)

if(TRAINLET_BUILD_TESTS)
  # The sample snapshot the views' tests and the fake controller share.
  add_library(trainlet_controller_views_testing STATIC EXCLUDE_FROM_ALL
    testing/sample_snapshot.cc)
  target_link_libraries(trainlet_controller_views_testing PUBLIC trainlet_controller_views)
  # The real HTTP server on the sample snapshot, changing every second
  # (e2e_controller_views: the page in headless Chromium, promtool, Prometheus).
  add_executable(fake_controller_http testing/fake_controller_http.cc)
  target_link_libraries(fake_controller_http PRIVATE trainlet_controller_http
    trainlet_controller_views_testing)
endif()
