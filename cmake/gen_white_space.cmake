# gen_white_space.cmake - run with `cmake -DIN=PropList.txt -DOUT=header -P gen_white_space.cmake`.
# Writes the Unicode White_Space property (from Debian's unicode-data PropList.txt) as a C table
# of inclusive code point ranges, so that no range is ever typed by hand.
file(STRINGS "${IN}" lines REGEX "^[0-9A-F.]+ *; White_Space #")
if(NOT lines)
  message(FATAL_ERROR "${IN}: no White_Space lines found (is it Unicode's PropList.txt?)")
endif()
set(body "")
set(count 0)
foreach(line ${lines})
  string(REGEX MATCH "^([0-9A-F]+)(\\.\\.([0-9A-F]+))?" m "${line}")
  set(lo "${CMAKE_MATCH_1}")
  set(hi "${CMAKE_MATCH_3}")
  if(hi STREQUAL "")
    set(hi "${lo}")
  endif()
  string(APPEND body "    {0x${lo}, 0x${hi}},\n")
  math(EXPR count "${count} + 1")
endforeach()
file(WRITE "${OUT}.tmp"
"/* Generated at build time by cmake/gen_white_space.cmake from ${IN}. Do not edit. */
static const uint32_t ig_white_space_ranges[${count}][2] = {
${body}};
")
file(RENAME "${OUT}.tmp" "${OUT}")
