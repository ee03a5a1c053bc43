# Turn every DIR/*.lua into a NUL-terminated char array dlock__lua_<name>
# in OUT. Byte arrays rather than string literals: C99 only promises
# literals of 4095 characters.
file(GLOB scripts ${DIR}/*.lua)
list(SORT scripts)
set(out "/* Generated from the scripts in src/lua by cmake/embed_lua.cmake. */\n")
foreach(f ${scripts})
  get_filename_component(name ${f} NAME_WE)
  file(READ ${f} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)"
         "\\1\n" bytes "${bytes}")
  string(APPEND out "const char dlock__lua_${name}[] = {\n${bytes}0x00};\n")
endforeach()
file(WRITE ${OUT}.tmp "${out}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
