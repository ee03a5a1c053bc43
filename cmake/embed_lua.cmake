# Turn every DIR/*.lua into a NUL-terminated char array dlock__lua_<name>
# in OUT. Byte arrays rather than string literals: C99 only promises
# literals of 4095 characters.
#
# A line "--@include NAME.luainc" is replaced by the text of DIR/NAME.luainc
# (pieces of Lua that several scripts share; Redis runs each script as one
# text, so they are joined here, not at run time). A piece may include
# other pieces, up to 4 deep (deeper is taken for a cycle: an error).

# Set ${out} to the hex text of file f with its pieces put in.
function(embed_expand f depth out)
  if(depth GREATER 4)
    message(FATAL_ERROR "${f}: --@include nested more than 4 deep (a cycle?)")
  endif()
  # The replacing is done on the hex text, where Lua's ; [ ] and \ cannot
  # meet CMake's list syntax; the names are found in the plain text.
  file(READ ${f} hex HEX)
  file(READ ${f} text)
  string(REGEX MATCHALL "--@include [a-z_]+\\.luainc" incs "${text}")
  list(REMOVE_DUPLICATES incs)
  math(EXPR next "${depth} + 1")
  foreach(inc ${incs})
    string(REPLACE "--@include " "" piece "${inc}")
    if(NOT EXISTS ${DIR}/${piece})
      message(FATAL_ERROR "${f}: ${inc}: no such file ${DIR}/${piece}")
    endif()
    string(HEX "${inc}\n" inc_hex)
    embed_expand(${DIR}/${piece} ${next} piece_hex)
    string(REPLACE "${inc_hex}" "${piece_hex}" hex "${hex}")
  endforeach()
  set(${out} "${hex}" PARENT_SCOPE)
endfunction()

file(GLOB scripts ${DIR}/*.lua)
list(SORT scripts)
set(out "/* Generated from the scripts in src/lua by cmake/embed_lua.cmake. */\n")
foreach(f ${scripts})
  get_filename_component(name ${f} NAME_WE)
  embed_expand(${f} 0 hex)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)"
         "\\1\n" bytes "${bytes}")
  string(APPEND out "const char dlock__lua_${name}[] = {\n${bytes}0x00};\n")
endforeach()
file(WRITE ${OUT}.tmp "${out}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
