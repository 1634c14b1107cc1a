## lib/io/data.mk: (no sources yet)
