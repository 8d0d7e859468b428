# Writes a text file into a C header as one string: run as a script,
#   cmake -DINPUT=<file> -DOUTPUT=<header> -DNAME=<identifier> -P EmbedText.cmake
# gives `static const char NAME[] = "...";` holding INPUT's bytes (carriage returns dropped).
# The CUDA backend embeds its device math (ops_math.cuh) this way, so the source it compiles at
# run time with NVRTC is the very text the precompiled kernels include: no file to find at run
# time, and a change to the header rebuilds both.
#
# Escaped: backslash, double quote and '?' (C11 still has trigraphs: "??=" in a comment would
# change the text). Each line becomes one literal of its own, so the header stays readable.
foreach(variable INPUT OUTPUT NAME)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "EmbedText.cmake: -D${variable}=... is required")
  endif()
endforeach()

file(READ "${INPUT}" text)
string(REPLACE "\r" "" text "${text}")
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "?" "\\?" text "${text}")
string(REPLACE "\n" "\\n\"\n    \"" text "${text}")

get_filename_component(input_name "${INPUT}" NAME)
set(header "/* Generated from ${input_name} by cmake/EmbedText.cmake: do not edit. */\n")
string(APPEND header "static const char ${NAME}[] =\n    \"${text}\";\n")
file(WRITE "${OUTPUT}" "${header}")
