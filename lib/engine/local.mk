## lib/engine: (no sources yet)
