# family_wall.cmake - the half of the wall around the model families and the objectives that the
# include path cannot enforce: none of their files may name a header by a path that leaves its
# folder ("../", or an absolute path). The other half is the include path itself (CMakeLists.txt:
# they compile with only IG_TRAIN_FAMILY_API of the trainer's headers). Run as
#   cmake "-DIG_FILES=a.c;b.h" -P cmake/family_wall.cmake
# by the build before the families compile, and by tests/cli/family_wall.sh.
foreach(f ${IG_FILES})
  file(STRINGS ${f} escapes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]*\\.\\.|[ \t]*/)")
  if(escapes)
    message(FATAL_ERROR "${f}: ${escapes}: a family or an objective includes the trainer's "
      "headers by room (\"family/family.h\"), and only those the build lists as meant for "
      "families (IG_TRAIN_FAMILY_API in CMakeLists.txt): see docs/adding-a-family.md")
  endif()
endforeach()
