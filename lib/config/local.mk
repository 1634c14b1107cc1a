## lib/config: (no sources yet)
