## lib/io/ckpt.mk: (no sources yet)
