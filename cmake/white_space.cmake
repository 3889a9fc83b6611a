# white_space.cmake - generates the Unicode White_Space table the pre-tokenizers need
# (preprocess/pretokenize.c) from Debian's unicode-data PropList.txt into the build tree.
# utf8proc gives the general categories but has no White_Space property.
set(IG_PROPLIST /usr/share/unicode/PropList.txt CACHE FILEPATH
  "Unicode PropList.txt (Debian package unicode-data)")
if(NOT EXISTS ${IG_PROPLIST})
  message(FATAL_ERROR "${IG_PROPLIST} not found: install the Debian package unicode-data "
    "(make deps) or pass -DIG_PROPLIST=/path/to/PropList.txt")
endif()
set(IG_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
add_custom_command(
  OUTPUT ${IG_GENERATED_DIR}/ig_white_space.h
  COMMAND ${CMAKE_COMMAND} -E make_directory ${IG_GENERATED_DIR}
  COMMAND ${CMAKE_COMMAND} -DIN=${IG_PROPLIST} -DOUT=${IG_GENERATED_DIR}/ig_white_space.h
    -P ${CMAKE_SOURCE_DIR}/cmake/gen_white_space.cmake
  DEPENDS ${IG_PROPLIST} ${CMAKE_SOURCE_DIR}/cmake/gen_white_space.cmake
  COMMENT "Generating White_Space table from ${IG_PROPLIST}")
target_sources(ingot_preprocess PRIVATE ${IG_GENERATED_DIR}/ig_white_space.h)
target_include_directories(ingot_preprocess PRIVATE ${IG_GENERATED_DIR})
