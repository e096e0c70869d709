"""IR -> IR transforms: each takes a program and returns a new one."""
