## lib/tune: (no sources yet)
