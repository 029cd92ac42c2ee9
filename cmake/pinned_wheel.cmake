# mlaserve_pinned_wheel(<out_var> NAME <package> VERSION <v> URL <url> SHA256 <hash>
#                       MEMBER <folder inside the wheel> CHECK <file under the unpacked folder>
#                       [LOCAL <wheel>])
# Header-only dependencies come from pinned PyPI wheels, never from the repository: this
# downloads the wheel into ${CMAKE_BINARY_DIR}/_deps (unless LOCAL names a copy, or it is there
# already), checks its sha256 (a mismatch is fatal), unpacks MEMBER next to it and sets
# <out_var> to the unpacked folder. A failed download sets <out_var> to "" and
# MLASERVE_PINNED_WHEEL_ERROR to the reason, so the caller decides whether that is fatal.
function(mlaserve_pinned_wheel out)
  cmake_parse_arguments(W "" "NAME;VERSION;URL;SHA256;MEMBER;CHECK;LOCAL" "" ${ARGN})
  set(_dir ${CMAKE_BINARY_DIR}/_deps/${W_NAME}-${W_VERSION})
  if(EXISTS ${_dir}/${W_CHECK})
    set(${out} ${_dir} PARENT_SCOPE)
    return()
  endif()
  set(_whl ${W_LOCAL})
  if(NOT _whl)
    set(_whl ${CMAKE_BINARY_DIR}/_deps/${W_NAME}-${W_VERSION}.whl)
    if(NOT EXISTS ${_whl})
      message(STATUS "mlaserve: downloading ${W_NAME} ${W_VERSION}")
      file(DOWNLOAD ${W_URL} ${_whl} STATUS _st EXPECTED_HASH SHA256=${W_SHA256})
      list(GET _st 0 _code)
      if(NOT _code EQUAL 0)
        file(REMOVE ${_whl})
        set(${out} "" PARENT_SCOPE)
        set(MLASERVE_PINNED_WHEEL_ERROR "${_st}" PARENT_SCOPE)
        return()
      endif()
    endif()
  endif()
  file(SHA256 ${_whl} _sum)
  if(NOT _sum STREQUAL W_SHA256)
    message(FATAL_ERROR "mlaserve: ${_whl} has sha256 ${_sum}, expected ${W_SHA256}")
  endif()
  file(MAKE_DIRECTORY ${_dir})
  execute_process(COMMAND ${CMAKE_COMMAND} -E tar xf ${_whl} -- ${W_MEMBER}
                  WORKING_DIRECTORY ${_dir} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT EXISTS ${_dir}/${W_CHECK})
    message(FATAL_ERROR "mlaserve: unpacking ${W_MEMBER} from ${_whl} failed")
  endif()
  set(${out} ${_dir} PARENT_SCOPE)
endfunction()
