# The CUDA backend's build: whether it is built (EAGLE_CUDA), for which GPUs, and what it links.
#
# Sets EG_HAVE_CUDA, EG_CUDA_INFO (for the build string), EG_CUDA_LINK (what the libraries link)
# and eg_cuda_configure_objects(target). Only the CUDA runtime is linked: cuBLASLt, cuDNN and
# NVRTC are opened with dlopen when the first GPU op needs them (src/backend/cuda/libraries.c).
# Linking them would map about 650 MB of libraries into every process, GPU or not, and add
# ~60 ms to its start (a test run starts hundreds of processes).
set(EG_HAVE_CUDA OFF)
set(EG_CUDA_INFO "off")
set(EG_CUDA_LINK "")
if(NOT EAGLE_CUDA MATCHES "^(ON|OFF|AUTO)$")
  message(FATAL_ERROR "EAGLE_CUDA must be ON, OFF or AUTO, not '${EAGLE_CUDA}'")
endif()
if(NOT EAGLE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(EG_HAVE_CUDA ON)
  elseif(EAGLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "EAGLE_CUDA=ON but no working nvcc was found (set CMAKE_CUDA_COMPILER)")
  else()
    message(STATUS "CUDA backend: off (no nvcc found)")
  endif()
endif()

if(EG_HAVE_CUDA)
  # sm_90 machine code for Hopper plus compute_90 PTX, which newer GPUs compile at load time.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  # The shared runtime, like the libraries linking CUDA::cudart (never a second, static copy).
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(EG_CUDA_INFO "${CUDAToolkit_VERSION} sm_${CMAKE_CUDA_ARCHITECTURES}")
  # nvcc's host code needs the C++ runtime (kernel registration, guarded statics): a C program
  # linking libeagle.a gets it from here.
  set(EG_CUDA_LINK CUDA::cudart stdc++)
  message(STATUS "CUDA backend: on (CUDA ${CUDAToolkit_VERSION}, architectures "
                 "${CMAKE_CUDA_ARCHITECTURES})")
endif()

function(eg_cuda_configure_objects target)
  if(NOT EG_HAVE_CUDA)
    return()
  endif()
  target_compile_definitions(${target} PRIVATE EG_HAVE_CUDA=1
    EG_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES}"
    EG_CUDA_LIBRARY_DIR="${CUDAToolkit_LIBRARY_DIR}")
  target_include_directories(${target} PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  # Warnings are errors in device code too; the host side of .cu files gets the C warnings that
  # make sense for C++.
  set(cuda_warnings -Xcompiler=-Wall,-Wextra)
  if(EG_WERROR)
    list(APPEND cuda_warnings -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:${cuda_warnings}>")
  target_link_libraries(${target} PUBLIC CUDA::cudart stdc++ ${CMAKE_DL_LIBS})
  # The device math as a C string (generated/ops_math_source.h): the fused kernels that NVRTC
  # compiles at run time begin with this very text (src/backend/cuda/fusion_source.c), so they
  # compute what the precompiled kernels including the header do. Regenerated when it changes.
  set(ops_math ${CMAKE_SOURCE_DIR}/src/backend/cuda/ops_math.cuh)
  set(ops_math_source ${CMAKE_BINARY_DIR}/generated/ops_math_source.h)
  add_custom_command(OUTPUT ${ops_math_source}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${ops_math} -DOUTPUT=${ops_math_source}
            -DNAME=eg__cuda_ops_math_source -P ${CMAKE_SOURCE_DIR}/cmake/EmbedText.cmake
    DEPENDS ${ops_math} ${CMAKE_SOURCE_DIR}/cmake/EmbedText.cmake
    COMMENT "Embedding ops_math.cuh for the fusion compiler" VERBATIM)
  target_sources(${target} PRIVATE ${ops_math_source})
  target_include_directories(${target} PRIVATE ${CMAKE_BINARY_DIR}/generated)
endfunction()
