## lib/model/gpt.mk: (no sources yet)
