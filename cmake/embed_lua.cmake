# Turn every DIR/*.lua into a NUL-terminated char array dlock__lua_<name>
# in OUT. Byte arrays rather than string literals: C99 only promises
# literals of 4095 characters.
#
# A line "--@include NAME.luainc" is replaced by the text of DIR/NAME.luainc
# (pieces of Lua that several scripts share; Redis runs each script as one
# text, so they are joined here, not at run time). Pieces do not include
# others.
file(GLOB scripts ${DIR}/*.lua)
list(SORT scripts)
set(out "/* Generated from the scripts in src/lua by cmake/embed_lua.cmake. */\n")
foreach(f ${scripts})
  get_filename_component(name ${f} NAME_WE)
  # The replacing is done on the hex text, where Lua's ; [ ] and \ cannot
  # meet CMake's list syntax; the names are found in the plain text.
  file(READ ${f} hex HEX)
  file(READ ${f} text)
  string(REGEX MATCHALL "--@include [a-z_]+\\.luainc" incs "${text}")
  foreach(inc ${incs})
    string(REPLACE "--@include " "" piece "${inc}")
    if(NOT EXISTS ${DIR}/${piece})
      message(FATAL_ERROR "${f}: ${inc}: no such file ${DIR}/${piece}")
    endif()
    string(HEX "${inc}\n" inc_hex)
    file(READ ${DIR}/${piece} piece_hex HEX)
    string(REPLACE "${inc_hex}" "${piece_hex}" hex "${hex}")
  endforeach()
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)"
         "\\1\n" bytes "${bytes}")
  string(APPEND out "const char dlock__lua_${name}[] = {\n${bytes}0x00};\n")
endforeach()
file(WRITE ${OUT}.tmp "${out}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
