# cuda_module.cmake - the CUDA module, libingot_cuda.so (included by the top level in a build with
# CUDA, after ingot_kernels): the CUDA backend (kernels/cuda/) and the NCCL communicator
# (comm/backends/comm_nccl.c) in one shared library beside the ingot program, with the CUDA
# runtime linked in statically and cuBLASLt, cuDNN and NCCL as its own dependencies. The program
# and every other executable link none of them: they load the module (core/module.c) when a CUDA
# backend or an NCCL communicator is first created.
#
# Why a module: linked into the program, those libraries cost every start about 0.1 s here and
# 0.36 s of CPU on a GPU machine (cuBLASLt's 560,000 relocations, the runtimes' initialisers),
# `ingot --help` included; dlopen'ed by the backend, only the processes that use the GPU pay it.
# One module rather than two: the backend and the communicator share one CUDA runtime (the
# backend's streams go to NCCL, ig_backend_fence), and a runtime linked statically is one per
# shared object.
#
# The module calls back into the program (error messages, the allocator, the backend's memory
# accounting, the communicator's bootstrap): the functions in cmake/cuda_module_imports.txt.
# Every executable that links ingot_kernels exports exactly those (--dynamic-list) and links
# them in (--undefined), whether or not it calls them itself; tests/cli/lazy_cuda.sh checks that
# the list is what the module imports.
set(IG_CUDA_MODULE_SOURCES $<TARGET_OBJECTS:ingot_kernels_cuda>)
if(IG_HAVE_NCCL)
  list(APPEND IG_CUDA_MODULE_SOURCES ${CMAKE_SOURCE_DIR}/comm/backends/comm_nccl.c)
endif()
add_library(ingot_cuda MODULE ${IG_CUDA_MODULE_SOURCES})
set_target_properties(ingot_cuda PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
  LINKER_LANGUAGE CUDA)
target_include_directories(ingot_cuda PRIVATE ${IG_INCLUDE_ROOT}/ingot_core)
# the static runtime's symbols stay inside the module (another CUDA runtime in the process, a
# peer's or torch's, must not bind to them)
target_link_options(ingot_cuda PRIVATE LINKER:--exclude-libs,ALL)
target_link_libraries(ingot_cuda PRIVATE CUDA::cudart_static CUDA::cublasLt)
if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
  target_link_libraries(ingot_cuda PRIVATE ${CUDNN_LIBRARY})
endif()
if(IG_HAVE_NCCL)
  target_include_directories(ingot_cuda PRIVATE ${NCCL_INCLUDE_DIR})
  target_link_libraries(ingot_cuda PRIVATE ${NCCL_LIBRARY})
endif()

# The program's side: cuda_host.c asks the driver (cuda.h's types only: nothing is linked) and
# names the architectures the module was built for.
target_include_directories(ingot_kernels PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_compile_definitions(ingot_kernels PRIVATE IG_CUDA_ARCHS="${IG_CUDA_ARCHS}")
# whatever is linked with ingot_kernels can load the module: it is built first, and the functions
# the module calls are in the executable and exported
add_dependencies(ingot_kernels ingot_cuda)
file(STRINGS ${CMAKE_SOURCE_DIR}/cmake/cuda_module_imports.txt IG_CUDA_MODULE_IMPORTS
  REGEX "^ig_[a-z0-9_]+$")
set(IG_CUDA_DYNLIST "{\n")
foreach(sym ${IG_CUDA_MODULE_IMPORTS})
  string(APPEND IG_CUDA_DYNLIST "  ${sym};\n")
  target_link_options(ingot_kernels INTERFACE LINKER:--undefined=${sym})
endforeach()
string(APPEND IG_CUDA_DYNLIST "};\n")
file(WRITE ${CMAKE_BINARY_DIR}/cuda_module_imports.dynlist "${IG_CUDA_DYNLIST}")
target_link_options(ingot_kernels INTERFACE
  LINKER:--dynamic-list=${CMAKE_BINARY_DIR}/cuda_module_imports.dynlist)
set_property(TARGET ingot_kernels APPEND PROPERTY INTERFACE_LINK_DEPENDS
  ${CMAKE_BINARY_DIR}/cuda_module_imports.dynlist)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/cmake/cuda_module_imports.txt)
