## lib/app: (no sources yet)
