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

if(NOT MLASERVE_CUTLASS_INCLUDE)
  set(_dir ${CMAKE_BINARY_DIR}/_deps/cutlass-${MLASERVE_CUTLASS_VERSION})
  set(_include ${_dir}/cutlass_library/source/include)
  if(NOT EXISTS ${_include}/cute/tensor.hpp)
    set(_whl ${MLASERVE_CUTLASS_WHEEL})
    if(NOT _whl)
      set(_whl ${CMAKE_BINARY_DIR}/_deps/nvidia_cutlass-${MLASERVE_CUTLASS_VERSION}.whl)
      if(NOT EXISTS ${_whl})
        message(STATUS "mlaserve: downloading nvidia-cutlass ${MLASERVE_CUTLASS_VERSION}")
        file(DOWNLOAD ${MLASERVE_CUTLASS_URL} ${_whl} STATUS _st
             EXPECTED_HASH SHA256=${MLASERVE_CUTLASS_SHA256})
        list(GET _st 0 _code)
        if(NOT _code EQUAL 0)
          file(REMOVE ${_whl})
          message(FATAL_ERROR "mlaserve: could not download nvidia-cutlass (${_st}); pass "
                              "-DMLASERVE_CUTLASS_WHEEL=<wheel> or build with -DMLASERVE_CUDA=OFF")
        endif()
      endif()
    endif()
    file(SHA256 ${_whl} _sum)
    if(NOT _sum STREQUAL MLASERVE_CUTLASS_SHA256)
      message(FATAL_ERROR "mlaserve: ${_whl} has sha256 ${_sum}, expected ${MLASERVE_CUTLASS_SHA256}")
    endif()
    file(MAKE_DIRECTORY ${_dir})
    execute_process(COMMAND ${CMAKE_COMMAND} -E tar xf ${_whl} -- cutlass_library/source/include
                    WORKING_DIRECTORY ${_dir} RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0 OR NOT EXISTS ${_include}/cute/tensor.hpp)
      message(FATAL_ERROR "mlaserve: unpacking ${_whl} failed")
    endif()
  endif()
  set(MLASERVE_CUTLASS_INCLUDE ${_include})
endif()

add_library(mlaserve_cutlass INTERFACE)
add_library(mlaserve::cutlass ALIAS mlaserve_cutlass)
# SYSTEM: CUTLASS's own warnings are not ours to fix.
target_include_directories(mlaserve_cutlass SYSTEM INTERFACE ${MLASERVE_CUTLASS_INCLUDE})
message(STATUS "mlaserve: CUTLASS headers from ${MLASERVE_CUTLASS_INCLUDE}")
