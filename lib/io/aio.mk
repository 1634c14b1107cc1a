## lib/io/aio.mk: (no sources yet)
