# cuDNN frontend headers for the CUDA build's second MHA-prefill provider (kernels/mha_prefill,
# docs/kernels.md), from the pinned PyPI wheel `nvidia-cudnn-frontend` (header-only C++ API
# under include/), downloaded and hash-checked at configure time, never copied into the
# repository. The wheels of one release differ only in their Python extension; the headers are
# the same in each, so one x86_64 wheel is pinned.
#
# libcudnn itself is NOT linked: the frontend is compiled with
# NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, and the provider dlopens libcudnn.so.9 on first use.
# Binaries therefore start without cuDNN; the provider then reports itself unavailable.
# Compiling needs only cudnn.h (cuDNN 9 headers, e.g. in the CUDA toolkit's include dir).
#
# MLASERVE_CUDNN: AUTO (default) builds the provider when cudnn.h and the headers can be had,
# else says why and leaves it out; ON makes either failure fatal; OFF leaves it out.
# Offline: -DMLASERVE_CUDNN_FRONTEND_WHEEL=/path/to.whl (same version and hash) or
# -DMLASERVE_CUDNN_FRONTEND_INCLUDE=/dir/with/cudnn_frontend.h.
# Defines the INTERFACE target mlaserve::cudnn_frontend and sets MLASERVE_WITH_CUDNN.
set(MLASERVE_CUDNN "AUTO" CACHE STRING "Build the cuDNN MHA-prefill provider: AUTO, ON or OFF")
set(MLASERVE_CUDNN_FRONTEND_VERSION "1.32.0")
set(MLASERVE_CUDNN_FRONTEND_SHA256 "8b354a8e550c083eb247f1eb39a7d69a4a269075f5a01e4fcbd2531680b17239")
set(MLASERVE_CUDNN_FRONTEND_URL
    "https://files.pythonhosted.org/packages/c6/1d/d30c756cfbb9bef18d99face13fd1af5629f56e2a477a6648d95c6c45141/nvidia_cudnn_frontend-${MLASERVE_CUDNN_FRONTEND_VERSION}-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl")
set(MLASERVE_CUDNN_FRONTEND_WHEEL "" CACHE FILEPATH "Local copy of the pinned nvidia-cudnn-frontend wheel")
set(MLASERVE_CUDNN_FRONTEND_INCLUDE "" CACHE PATH "A cuDNN frontend include dir (cudnn_frontend.h) to use instead of the wheel")
set(MLASERVE_WITH_CUDNN OFF)

# Leaves the provider out (AUTO) or stops (ON), saying why.
function(_mlaserve_cudnn_unavailable why)
  if(MLASERVE_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "mlaserve: MLASERVE_CUDNN=ON but ${why}")
  endif()
  message(STATUS "mlaserve: cuDNN MHA-prefill provider not built: ${why}")
endfunction()

include(${CMAKE_CURRENT_LIST_DIR}/pinned_wheel.cmake)
function(_mlaserve_cudnn_frontend_headers out)
  mlaserve_pinned_wheel(_dir NAME nvidia-cudnn-frontend VERSION ${MLASERVE_CUDNN_FRONTEND_VERSION}
                        URL ${MLASERVE_CUDNN_FRONTEND_URL} SHA256 ${MLASERVE_CUDNN_FRONTEND_SHA256}
                        MEMBER include CHECK include/cudnn_frontend.h
                        LOCAL "${MLASERVE_CUDNN_FRONTEND_WHEEL}")
  if(NOT _dir)
    _mlaserve_cudnn_unavailable("nvidia-cudnn-frontend could not be downloaded "
                                "(${MLASERVE_PINNED_WHEEL_ERROR}); pass "
                                "-DMLASERVE_CUDNN_FRONTEND_WHEEL=<wheel> or -DMLASERVE_CUDNN=OFF")
    set(${out} "" PARENT_SCOPE)
    return()
  endif()
  set(${out} ${_dir}/include PARENT_SCOPE)
endfunction()

if(MLASERVE_CUDNN STREQUAL "OFF")
  message(STATUS "mlaserve: cuDNN MHA-prefill provider not built (MLASERVE_CUDNN=OFF)")
else()
  # The backend API header the frontend compiles against (cuDNN 9). Not the library.
  find_path(MLASERVE_CUDNN_H_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include
            PATH_SUFFIXES "" x86_64-linux-gnu)
  if(NOT MLASERVE_CUDNN_H_DIR)
    _mlaserve_cudnn_unavailable("no cudnn.h (cuDNN 9 headers) next to the CUDA toolkit")
  else()
    set(_fe_include ${MLASERVE_CUDNN_FRONTEND_INCLUDE})
    if(NOT _fe_include)
      _mlaserve_cudnn_frontend_headers(_fe_include)
    endif()
    if(_fe_include)
      add_library(mlaserve_cudnn_frontend INTERFACE)
      add_library(mlaserve::cudnn_frontend ALIAS mlaserve_cudnn_frontend)
      # SYSTEM: the frontend's own warnings are not ours to fix.
      target_include_directories(mlaserve_cudnn_frontend SYSTEM INTERFACE ${_fe_include}
                                 ${MLASERVE_CUDNN_H_DIR})
      # Dynamic loading: cudnn* calls go through dlsym on a handle the provider opens
      # (cudnn_frontend::cudnn_dlhandle); no JSON (graph serialization is not used).
      target_compile_definitions(mlaserve_cudnn_frontend INTERFACE
                                 NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING CUDNN_FRONTEND_SKIP_JSON_LIB)
      target_link_libraries(mlaserve_cudnn_frontend INTERFACE ${CMAKE_DL_LIBS})
      set(MLASERVE_WITH_CUDNN ON)
      message(STATUS "mlaserve: cuDNN frontend headers from ${_fe_include}, cudnn.h from ${MLASERVE_CUDNN_H_DIR}")
    endif()
  endif()
endif()
