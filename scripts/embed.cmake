# Writes OUT, a C file holding IN's bytes as `srv_page_html` (NUL-terminated) and its length
# `srv_page_html_len`: the web page of `ditrun serve`, compiled into the binary.
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
file(WRITE ${OUT} "/* generated from tools/serve_page.html by scripts/embed.cmake */\n#include <stddef.h>\n"
  "const unsigned char srv_page_html[] = {${hex}0};\n"
  "const size_t srv_page_html_len = sizeof srv_page_html - 1;\n")
