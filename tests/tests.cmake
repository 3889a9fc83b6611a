# Test registration. Every tests/test_*.c is a cmocka program (label "unit", or "cuda" for
# tests/test_cuda_*.c, which need a GPU and exit 77 without one); every
# tests/cli/*.sh is an end-to-end test of the ingot program (label "cli"); tests/mpi/*.sh run
# under mpirun (label "mpi"). Tests find their inputs through environment variables:
#   IG_SOURCE_DIR  the checkout        IG_BUILD_DIR  this build
#   IG_INGOT       the ingot program   IG_SHARED_DATA ../shared/data when it exists (else unset)
get_filename_component(IG_SHARED_DATA_DIR ${CMAKE_SOURCE_DIR}/../shared/data ABSOLUTE)
set(IG_TEST_ENV
  "IG_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
  "IG_BUILD_DIR=${CMAKE_BINARY_DIR}"
  "IG_INGOT=$<TARGET_FILE:ingot>")
if(EXISTS ${IG_SHARED_DATA_DIR}/README.md)
  list(APPEND IG_TEST_ENV "IG_SHARED_DATA=${IG_SHARED_DATA_DIR}")
endif()
if(IG_HAVE_CUDA)
  list(APPEND IG_TEST_ENV "IG_CUDA_BUILT=1")
endif()
if(IG_SANITIZE)
  list(APPEND IG_TEST_ENV "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0"
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
endif()

# Tests may include private headers (to check a piece against its oracle): they alone get the
# source root on their include path, and train/ (whose rooms name one another's headers by room,
# "model/model.h"), and FFmpeg's headers (the video tests look at raw frames).
add_library(igtest STATIC ${CMAKE_SOURCE_DIR}/tests/testutil.c)
target_link_libraries(igtest PUBLIC ingot_all PkgConfig::CMOCKA PkgConfig::JANSSON PkgConfig::LIBAV)
target_include_directories(igtest PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/train)
target_compile_definitions(igtest PUBLIC IG_SOURCE_DIR="${CMAKE_SOURCE_DIR}")

file(GLOB IG_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.c)
foreach(src ${IG_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE igtest)
  # the CPU kernel tests (test_kernels, test_kernels_dit) share their fixture
  if(name MATCHES "^test_kernels")
    target_sources(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/kernels_fixture.c)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  # cmocka: exit 0 = pass; tests that cannot run (no shared data, no device) print why and
  # exit 77, which ctest reports as skipped. test_cuda_*.c need a GPU: label "cuda"
  # (ctest -L cuda), the others "unit".
  set(label unit)
  if(name MATCHES "^test_cuda_")
    set(label cuda)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS ${label} ENVIRONMENT "${IG_TEST_ENV}"
    SKIP_RETURN_CODE 77 TIMEOUT 600)
endforeach()

file(GLOB IG_CLI_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cli/*.sh)
list(REMOVE_ITEM IG_CLI_TESTS ${CMAKE_SOURCE_DIR}/tests/cli/lib.sh) # helpers the scripts source
foreach(src ${IG_CLI_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_test(NAME cli_${name} COMMAND bash ${src})
  set_tests_properties(cli_${name} PROPERTIES LABELS cli ENVIRONMENT "${IG_TEST_ENV}"
    SKIP_RETURN_CODE 77 TIMEOUT 600)
endforeach()

# Programs the MPI scripts run under mpirun (tests/mpi/*.c), built beside the tests.
file(GLOB IG_MPI_PROGRAMS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/mpi/*.c)
foreach(src ${IG_MPI_PROGRAMS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE igtest)
endforeach()

file(GLOB IG_MPI_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/mpi/*.sh)
list(REMOVE_ITEM IG_MPI_TESTS ${CMAKE_SOURCE_DIR}/tests/mpi/lib.sh) # helpers the scripts source
foreach(src ${IG_MPI_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_test(NAME mpi_${name} COMMAND bash ${src})
  set_tests_properties(mpi_${name} PROPERTIES LABELS mpi ENVIRONMENT "${IG_TEST_ENV}"
    SKIP_RETURN_CODE 77 TIMEOUT 900 RUN_SERIAL TRUE)
endforeach()
# the NCCL communicator needs a GPU as well
if(TEST mpi_nccl)
  set_property(TEST mpi_nccl APPEND PROPERTY LABELS cuda)
endif()

# Fuzz targets as regression tests (tests/fuzz/README.md): in every build but the libFuzzer one,
# each tests/fuzz/fuzz_*.c is linked with a standalone main (tests/fuzz/corpus_driver.c) as
# NAME_corpus and run once over its committed corpus tests/fuzz/corpus/NAME/ as ctest NAME (label
# unit: the ASan+UBSan build runs them too). `make fuzz` builds the same sources with libFuzzer
# (tests/fuzz/fuzz.cmake). fuzz_clang_warnings holds what make fuzz compiles to clang's warnings
# (-Werror, NDEBUG), so that the clang build cannot rot unseen behind gcc's.
if(NOT IG_FUZZ)
  file(GLOB IG_FUZZ_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_*.c)
  foreach(src ${IG_FUZZ_SOURCES})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name}_corpus ${src} ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus_driver.c)
    target_link_libraries(${name}_corpus PRIVATE ingot_all)
    target_include_directories(${name}_corpus PRIVATE ${CMAKE_SOURCE_DIR})
    add_test(NAME ${name} COMMAND ${name}_corpus ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${name})
    set_tests_properties(${name} PROPERTIES LABELS unit ENVIRONMENT "${IG_TEST_ENV}" TIMEOUT 600)
  endforeach()
  if(NOT IG_SANITIZE AND NOT IG_TSAN)
    add_test(NAME fuzz_clang_warnings
      COMMAND bash ${CMAKE_SOURCE_DIR}/tests/fuzz/clang_check.sh ${CMAKE_BINARY_DIR})
    set_tests_properties(fuzz_clang_warnings PROPERTIES LABELS unit SKIP_RETURN_CODE 77
      TIMEOUT 600)
  endif()
endif()
