# The CUDA side of the build: toolkit detection, the arch / head-dim / dtype option lists, CUTLASS
# headers, and the kernel instantiation list, which scripts/gen_instantiations.py generates and
# this file reads (one source of truth for what gets compiled).

set(FLASHATTN_CUDA_ARCHS "80;90a" CACHE STRING "CUDA architectures to compile kernels for")
set(FLASHATTN_HEAD_DIMS "32;64;96;128;160;192;224;256" CACHE STRING "Head dims to instantiate CUDA kernels for")
set(FLASHATTN_DTYPES "f16;bf16" CACHE STRING "Element types to instantiate CUDA kernels for (f16, bf16)")
option(FLASHATTN_CUDA_BACKWARD "Instantiate the CUDA backward kernels" ON)
set(CUTLASS_DIR "" CACHE PATH "A CUTLASS checkout or install (holding include/cute); default: the one scripts/setup.sh puts in .deps")

set(FLASHATTN_WITH_CUDA OFF)
if(NOT FLASHATTN_ENABLE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(FLASHATTN_WITH_CUDA ON)
  elseif(FLASHATTN_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FLASHATTN_ENABLE_CUDA=ON but no CUDA compiler was found (set CUDACXX or put nvcc on PATH)")
  else()
    message(STATUS "flashattn: no CUDA compiler found, building the CPU backend only")
  endif()
endif()

if(NOT FLASHATTN_WITH_CUDA)
  return()
endif()

set(CMAKE_CUDA_ARCHITECTURES "${FLASHATTN_CUDA_ARCHS}")
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)

# CUTLASS / CuTe headers: -DCUTLASS_DIR=..., else the PyPI wheel scripts/setup.sh installed.
set(_cutlass_candidates "${CUTLASS_DIR}/include" "${CUTLASS_DIR}"
    "${PROJECT_SOURCE_DIR}/.deps/cutlass/cutlass_library/source/include")
find_path(FLASHATTN_CUTLASS_INCLUDE_DIR cute/tensor.hpp PATHS ${_cutlass_candidates} NO_DEFAULT_PATH)
if(NOT FLASHATTN_CUTLASS_INCLUDE_DIR)
  message(FATAL_ERROR "CUTLASS/CuTe headers not found: run scripts/setup.sh (installs the nvidia-cutlass "
                      "wheel into .deps/), pass -DCUTLASS_DIR=<cutlass root>, or -DFLASHATTN_ENABLE_CUDA=OFF")
endif()
message(STATUS "flashattn: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, archs ${FLASHATTN_CUDA_ARCHS}, "
               "head dims ${FLASHATTN_HEAD_DIMS}, dtypes ${FLASHATTN_DTYPES}, CUTLASS ${FLASHATTN_CUTLASS_INCLUDE_DIR}")

find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(FLASHATTN_GENERATED_DIR "${PROJECT_BINARY_DIR}/generated")
execute_process(
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gen_instantiations.py
          --archs "${FLASHATTN_CUDA_ARCHS}" --head-dims "${FLASHATTN_HEAD_DIMS}"
          --dtypes "${FLASHATTN_DTYPES}" --backward "${FLASHATTN_CUDA_BACKWARD}"
          --out "${FLASHATTN_GENERATED_DIR}"
  OUTPUT_VARIABLE FLASHATTN_INSTANTIATION_SOURCES
  RESULT_VARIABLE _gen_result
  ERROR_VARIABLE _gen_error)
if(NOT _gen_result EQUAL 0)
  message(FATAL_ERROR "scripts/gen_instantiations.py failed: ${_gen_error}")
endif()
string(STRIP "${FLASHATTN_INSTANTIATION_SOURCES}" FLASHATTN_INSTANTIATION_SOURCES)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/scripts/gen_instantiations.py)

# Adds the CUDA backend (runtime queries, dispatch and the generated kernel instantiations).
function(flashattn_add_cuda_backend target)
  target_sources(${target} PRIVATE cuda/runtime.cpp cuda/launch_common.cu cuda/launch_fwd.cu cuda/launch_bwd.cu cuda/kv_append_sm80.cu cuda/merge_sm80.cu cuda/bwd_rows_sm80.cu ${FLASHATTN_INSTANTIATION_SOURCES})
  # CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED: CuTe's wgmma selectors offer every N that is a
  # multiple of 8 (80-key tiles at d 256 take 64x80x16 rather than five 64x16x16).
  target_compile_definitions(${target} PRIVATE FLASHATTN_WITH_CUDA CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED)
  target_include_directories(${target} PRIVATE ${FLASHATTN_GENERATED_DIR})
  target_include_directories(${target} SYSTEM PRIVATE ${FLASHATTN_CUTLASS_INCLUDE_DIR}
                             ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_INCLUDE_DIRS}/cccl)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
endfunction()
