# Writes the file IN as a C++ raw string literal to OUT, for #include in an
# initializer (agent/warm_workers.cc embeds the standby's Python program).
file(READ "${IN}" content)
file(WRITE "${OUT}" "R\"TRAINLET_EMBED(${content})TRAINLET_EMBED\"\n")
