# CUTLASS / CuTe headers for the CUDA build, from the pinned PyPI wheel `nvidia-cutlass`
# (headers under cutlass_library/source/include), downloaded and hash-checked at configure
# time, never copied into the repository. Offline: pass -DMLASERVE_CUTLASS_WHEEL=/path/to.whl
# (same version and hash) or -DMLASERVE_CUTLASS_INCLUDE=/dir/with/cute/and/cutlass.
# Defines the INTERFACE target mlaserve::cutlass.
set(MLASERVE_CUTLASS_VERSION "4.2.0.0")
set(MLASERVE_CUTLASS_SHA256 "f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6")
set(MLASERVE_CUTLASS_URL
    "https://files.pythonhosted.org/packages/21/6b/e86fc2fd536dd4b8bd2209aa31d7002610c501b0802337787eac9c9b328c/nvidia_cutlass-${MLASERVE_CUTLASS_VERSION}-py3-none-any.whl")
set(MLASERVE_CUTLASS_WHEEL "" CACHE FILEPATH "Local copy of the pinned nvidia-cutlass wheel")
set(MLASERVE_CUTLASS_INCLUDE "" CACHE PATH "A CUTLASS include dir (cute/, cutlass/) to use instead of the wheel")

include(${CMAKE_CURRENT_LIST_DIR}/pinned_wheel.cmake)
if(NOT MLASERVE_CUTLASS_INCLUDE)
  mlaserve_pinned_wheel(_cutlass_dir NAME nvidia-cutlass VERSION ${MLASERVE_CUTLASS_VERSION}
                        URL ${MLASERVE_CUTLASS_URL} SHA256 ${MLASERVE_CUTLASS_SHA256}
                        MEMBER cutlass_library/source/include
                        CHECK cutlass_library/source/include/cute/tensor.hpp
                        LOCAL "${MLASERVE_CUTLASS_WHEEL}")
  if(NOT _cutlass_dir)
    message(FATAL_ERROR "mlaserve: could not download nvidia-cutlass (${MLASERVE_PINNED_WHEEL_ERROR}); "
                        "pass -DMLASERVE_CUTLASS_WHEEL=<wheel> or build with -DMLASERVE_CUDA=OFF")
  endif()
  set(MLASERVE_CUTLASS_INCLUDE ${_cutlass_dir}/cutlass_library/source/include)
endif()

add_library(mlaserve_cutlass INTERFACE)
add_library(mlaserve::cutlass ALIAS mlaserve_cutlass)
# SYSTEM: CUTLASS's own warnings are not ours to fix.
target_include_directories(mlaserve_cutlass SYSTEM INTERFACE ${MLASERVE_CUTLASS_INCLUDE})
message(STATUS "mlaserve: CUTLASS headers from ${MLASERVE_CUTLASS_INCLUDE}")
