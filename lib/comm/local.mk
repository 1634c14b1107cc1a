## lib/comm: (no sources yet)
