# cmake -DIN=file -DNAME=its/repo/path -DOUT=file.cpp -DNAMESPACE=ns -DFUNCTION=name -P embed_text.cmake
# Writes OUT: a C++ function `std::string_view ns::name()` returning IN's bytes, as a raw
# string literal (IN must not contain the delimiter ")BRL_EMBED"), so an asset can be edited
# as the file it is and still ship inside the executable.
file(READ "${IN}" content)
string(FIND "${content}" ")BRL_EMBED\"" found)
if(NOT found EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw string delimiter )BRL_EMBED\"")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${NAME} by cmake/embed_text.cmake: edit that file, not this one.\n"
  "#include <string_view>\n\nnamespace ${NAMESPACE} {\n\nstd::string_view ${FUNCTION}() {\n"
  "  static constexpr std::string_view kText = R\"BRL_EMBED(${content})BRL_EMBED\";\n  return kText;\n}\n\n}  // namespace ${NAMESPACE}\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
