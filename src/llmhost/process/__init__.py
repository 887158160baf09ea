"""The life of llmhost's processes: serving and draining (`lifecycle`), Ctrl-C for long commands
(`interrupt`), children that end with their starter (`children`), the garbage collector held
off while a process starts (`startup`)."""
