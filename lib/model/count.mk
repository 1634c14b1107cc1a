## lib/model/count.mk: (no sources yet)
