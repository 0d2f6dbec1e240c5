# cmake -DIN=template.html -DOUT=report_template.h -P embed_template.cmake
# The page template as a C++ string, so the template stays an HTML file that can be edited as one.
file(READ "${IN}" content)
string(FIND "${content}" ")LSHTML\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )LSHTML\"")
endif()
file(WRITE "${OUT}.tmp" "// Generated from report/template.html by report/embed_template.cmake: do not edit.\n#pragma once\nnamespace lockstep::report {\ninline constexpr const char kReportTemplate[] = R\"LSHTML(${content})LSHTML\";\n}\n")
file(RENAME "${OUT}.tmp" "${OUT}")
