# embed.cmake: writes the text of INPUT into OUTPUT as a C string named NAME.
#   cmake -DINPUT=f.lua -DOUTPUT=f.c -DNAME=symbol -P embed.cmake
file(READ "${INPUT}" text)
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "\n" "\\n\"\n\"" text "${text}")
file(WRITE "${OUTPUT}" "/* generated from ${INPUT} by cmake/embed.cmake: do not edit */\nconst char ${NAME}[] =\n\"${text}\";\n")
