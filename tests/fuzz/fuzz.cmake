# fuzz.cmake - libFuzzer targets (included by CMakeLists.txt when -DIG_FUZZ=ON; needs clang:
# `make fuzz` configures build-fuzz with CC=clang). Every tests/fuzz/fuzz_*.c becomes an
# executable in BUILD/fuzz/ linked with -fsanitize=fuzzer,address,undefined; the libraries are
# compiled with -fsanitize=fuzzer-no-link,address,undefined so that the coverage of the library
# code guides the fuzzer and its bugs crash. Run them with tests/fuzz/run.sh BUILD SECONDS.
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "IG_FUZZ needs clang (libFuzzer): configure with CC=clang, "
    "e.g. `make fuzz` or `CC=clang cmake -S . -B build-fuzz -DIG_FUZZ=ON`")
endif()

set(IG_FUZZ_SAN address,undefined)
foreach(lib ingot_core ingot_dataset ingot_loader ingot_comm ingot_preprocess ingot_kernels
    ingot_train ingot_train_families)
  target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link,${IG_FUZZ_SAN}
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  # everything that links the library (tests, the ingot program) needs the sanitizer runtimes
  target_link_options(${lib} INTERFACE -fsanitize=${IG_FUZZ_SAN})
endforeach()

file(GLOB IG_FUZZ_TARGETS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_*.c)
foreach(src ${IG_FUZZ_TARGETS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer,${IG_FUZZ_SAN}
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,${IG_FUZZ_SAN})
  target_link_libraries(${name} PRIVATE ingot_all)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/train)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
endforeach()

# `make fuzz` builds only these (the tests need not compile under clang's warnings)
set(IG_FUZZ_NAMES)
foreach(src ${IG_FUZZ_TARGETS})
  get_filename_component(name ${src} NAME_WE)
  list(APPEND IG_FUZZ_NAMES ${name})
endforeach()
add_custom_target(fuzz_all DEPENDS ${IG_FUZZ_NAMES})
